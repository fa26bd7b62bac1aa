// Streaming gzip inflate of TFRecord files: exact bytes for multi-member streams, clear errors
// for truncated or corrupt streams and exceeded limits, and a bad first header found after
// reading only the first piece of a large compressed file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/framing.hpp"
#include "sources/tfrecord/gzip_stream.hpp"

using namespace mpistage;
using namespace mpistage::tfrecord;

namespace {

/// One gzip member of `in` (zlib, level 6).
std::vector<std::uint8_t> gzip_member(const std::vector<std::uint8_t>& in) {
    z_stream zs{};
    EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::vector<std::uint8_t> out(deflateBound(&zs, static_cast<uLong>(in.size())) + 64);
    zs.next_in = const_cast<Bytef*>(in.data());
    zs.avail_in = static_cast<uInt>(in.size());
    zs.next_out = out.data();
    zs.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

std::vector<std::uint8_t> records(std::size_t n, std::size_t len) {
    std::vector<std::uint8_t> bytes;
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<std::uint8_t> payload(len, static_cast<std::uint8_t>(i * 7));
        append_record(bytes, payload.data(), payload.size());
    }
    return bytes;
}

/// Inflates `gz` from memory.
std::vector<std::uint8_t> inflate(const std::vector<std::uint8_t>& gz, const GzipLimits& limits,
                                  OnCorrupt policy) {
    const ScanFile f = memory_file("t.gz", gz.data(), gz.size());
    return inflate_tfrecord("t.gz", gz.size(), f.read, limits, policy);
}

std::string error_of(const std::vector<std::uint8_t>& gz, const GzipLimits& limits,
                     OnCorrupt policy) {
    try {
        inflate(gz, limits, policy);
    } catch (const FormatError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST(TfRecordGzip, MultiMemberWithPaddingInflatesExactly) {
    const auto a = records(300, 100);
    const auto b = records(50, 3000);
    auto gz = gzip_member(a);
    gz.insert(gz.end(), 4, 0);  // zero padding between members
    const auto gz_b = gzip_member(b);
    gz.insert(gz.end(), gz_b.begin(), gz_b.end());
    GzipLimits small_pieces;
    small_pieces.piece_bytes = 1024;  // many refills of input and output
    auto want = a;
    want.insert(want.end(), b.begin(), b.end());
    EXPECT_EQ(inflate(gz, small_pieces, OnCorrupt::error), want);
    EXPECT_EQ(inflate(gz, GzipLimits{}, OnCorrupt::error), want);
}

TEST(TfRecordGzip, TruncatedAndCorruptStreamsNameTheFile) {
    const auto gz = gzip_member(records(200, 200));
    const std::vector<std::uint8_t> cut(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
    EXPECT_NE(error_of(cut, GzipLimits{}, OnCorrupt::error).find("t.gz: truncated gzip stream"),
              std::string::npos);
    auto bad = gz;
    bad[bad.size() - 6] ^= 0xff;  // the CRC32 trailer
    EXPECT_NE(error_of(bad, GzipLimits{}, OnCorrupt::error).find("t.gz: gzip data corrupt"),
              std::string::npos);
}

TEST(TfRecordGzip, LimitsStopInflating) {
    const auto gz = gzip_member(records(1000, 1000));  // 1,016,000 bytes, compresses well
    GzipLimits size;
    size.max_decompressed_bytes = 100000;
    size.piece_bytes = 4096;
    EXPECT_NE(error_of(gz, size, OnCorrupt::error)
                  .find("t.gz: decompresses to more than 100000 bytes (max_decompressed_bytes"),
              std::string::npos);
    GzipLimits ratio;
    ratio.max_decompression_ratio = 5;
    EXPECT_NE(error_of(gz, ratio, OnCorrupt::error).find("(max_decompression_ratio"),
              std::string::npos);
    ratio.max_decompression_ratio = 0;  // no ratio limit
    EXPECT_EQ(inflate(gz, ratio, OnCorrupt::error).size(), 1016000u);
}

TEST(TfRecordGzip, BadFirstHeaderFailsAfterTheFirstPiece) {
    // 256 MiB of zeros (about 250 KB compressed): the header at offset 0 has a bad length CRC,
    // found after reading one piece, not after inflating everything.
    std::vector<std::uint8_t> gz;
    {
        z_stream zs{};
        ASSERT_EQ(deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
        const std::vector<std::uint8_t> zeros(1 << 20, 0);
        std::vector<std::uint8_t> buf(1 << 20);
        for (int i = 0; i < 256; ++i) {
            zs.next_in = const_cast<Bytef*>(zeros.data());
            zs.avail_in = static_cast<uInt>(zeros.size());
            const int flush = i == 255 ? Z_FINISH : Z_NO_FLUSH;
            do {
                zs.next_out = buf.data();
                zs.avail_out = static_cast<uInt>(buf.size());
                deflate(&zs, flush);
                gz.insert(gz.end(), buf.data(), buf.data() + (buf.size() - zs.avail_out));
            } while (zs.avail_out == 0);
        }
        deflateEnd(&zs);
    }
    GzipLimits limits;
    limits.piece_bytes = 4096;
    try {
        inflate(gz, limits, OnCorrupt::error);
        FAIL() << "expected a FormatError";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find(
                      "t.gz (decompressed): not a TFRecord / truncated record at offset 0"),
                  std::string::npos)
            << e.what();
    }
    // Counting the compressed bytes read: one piece.
    const ScanFile f = memory_file("t.gz", gz.data(), gz.size());
    std::uint64_t reads = 0;
    try {
        inflate_tfrecord(
            "t.gz", gz.size(),
            [&](std::uint64_t off, void* dst, std::uint64_t n) {
                reads += n;
                f.read(off, dst, n);
            },
            limits, OnCorrupt::error);
    } catch (const FormatError&) {
    }
    EXPECT_EQ(reads, 4096u) << "read " << reads << " of " << gz.size() << " compressed bytes";
}
