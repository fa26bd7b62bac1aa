/// @file
/// Regression tests from fuzz/fuzz_idx_header.cpp: IDX headers whose dimensions overflow 64 bits
/// are FormatErrors in both IDX readers (the converter's `read_idx_any` and the RawSource's
/// `parse_idx_header`), never a wrapped size.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mpistage/convert.hpp"
#include "mpistage/error.hpp"
#include "mpistage/raw_source.hpp"

namespace {

std::string write_bytes(const std::string& name, const std::vector<unsigned char>& bytes) {
    const auto path = std::filesystem::temp_directory_path() /
                      ("mpistage_idx_" + std::to_string(::getpid()) + "_" + name);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path.string();
}

template <class Fn>
std::string format_error_of(Fn&& fn) {
    try {
        fn();
    } catch (const mpistage::FormatError& e) {
        return e.what();
    } catch (const mpistage::ConfigError& e) {
        return e.what();
    }
    return "";
}

TEST(IdxRead, DimensionsWrappingTwoToThe64AreRefused) {
    // uint8, 3 dims: 2^31 x 2^31 x 4 = 2^64 elements, which wraps to 0; no data follows.
    const std::string path =
        write_bytes("wrap", {0, 0, 8, 3, 0x80, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 4});
    const std::string convert = format_error_of([&] { mpistage::read_idx_any(path); });
    EXPECT_NE(convert.find("exceeds 2^62"), std::string::npos) << convert;
    EXPECT_NE(convert.find(path), std::string::npos) << convert;
    const std::string raw = format_error_of([&] { mpistage::parse_idx_header(path, "x"); });
    EXPECT_FALSE(raw.empty());
    std::filesystem::remove(path);
}

TEST(IdxRead, ZeroRecordsWithAnOverflowingSampleShapeAreRefused) {
    // int32, 3 dims: 0 x 2^31 x 2^31: no records, but a sample of 2^62 elements x 4 bytes.
    const std::string path =
        write_bytes("zero", {0, 0, 0x0c, 3, 0, 0, 0, 0, 0x80, 0, 0, 0, 0x80, 0, 0, 0});
    const std::string convert = format_error_of([&] { mpistage::read_idx_any(path); });
    EXPECT_NE(convert.find("exceeds 2^62"), std::string::npos) << convert;
    const std::string raw = format_error_of([&] { mpistage::parse_idx_header(path, "x"); });
    EXPECT_FALSE(raw.empty());
    std::filesystem::remove(path);
}

TEST(IdxRead, AWellFormedArrayStillReads) {
    // uint8, 2 dims: 2 x 3, then 6 bytes.
    const std::string path = write_bytes("ok", {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6});
    const mpistage::IdxArray a = mpistage::read_idx_any(path);
    ASSERT_EQ(a.dims.size(), 2u);
    EXPECT_EQ(a.dims[0], 2u);
    EXPECT_EQ(a.dims[1], 3u);
    ASSERT_EQ(a.data.size(), 6u);
    EXPECT_EQ(static_cast<int>(a.data[5]), 6);
    std::filesystem::remove(path);
}

}  // namespace
