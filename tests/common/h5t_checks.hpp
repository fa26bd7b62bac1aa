#pragma once
// Part of the shared MPI test helpers (namespace h5t, see tests/mpi/hdf5_test_util.hpp): a
// scatterable BatchSink, and the check that an error is the same on every rank
// (H5T_EXPECT_SAME_ERROR).

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "h5t_mpi.hpp"
#include "mpistage/error.hpp"
#include "mpistage/source.hpp"

namespace h5t {

/// A BatchSink over one contiguous buffer per field; slot k of field f lives at
/// `pos[k] * sample_bytes` (identity when `pos` is empty), so tests can scatter slots.
class VectorSink final : public mpistage::BatchSink {
public:
    VectorSink(const std::vector<mpistage::FieldInfo>& fields, std::size_t slots,
               std::vector<std::size_t> pos = {})
        : fields_(fields), pos_(std::move(pos)) {
        for (const auto& f : fields) bufs_.emplace_back(f.sample_bytes * slots, std::byte{0xAB});
    }
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        const std::size_t p = pos_.empty() ? slot : pos_[slot];
        return bufs_[field].data() + p * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t, std::size_t, std::uint64_t) override {
        throw mpistage::ConfigError("VectorSink: no ragged fields in these tests");
    }
    template <class T>
    T value(std::size_t field, std::size_t position, std::size_t element = 0) const {
        T v;
        std::memcpy(
            &v, bufs_[field].data() + position * fields_[field].sample_bytes + element * sizeof(T),
            sizeof(T));
        return v;
    }
    const std::vector<std::byte>& buffer(std::size_t field) const { return bufs_[field]; }

private:
    std::vector<mpistage::FieldInfo> fields_;
    std::vector<std::size_t> pos_;
    std::vector<std::vector<std::byte>> bufs_;
};

/// Outcome of a call that is expected to throw the same error on every rank.
struct Outcome {
    bool threw = false;
    bool right_type = false;
    int kind = 0;
    std::string message;
};

/// Runs `fn` (which may make collective calls), catching what it throws.
template <class E, class Fn>
Outcome catch_error(Fn&& fn) {
    Outcome o;
    try {
        fn();
    } catch (const E& e) {
        o.threw = o.right_type = true;
        o.kind = static_cast<int>(e.kind());
        o.message = e.what();
    } catch (const mpistage::Error& e) {
        o.threw = true;
        o.kind = static_cast<int>(e.kind());
        o.message = e.what();
    } catch (const std::exception& e) {
        o.threw = true;
        o.kind = -1;
        o.message = e.what();
    }
    return o;
}

/// Collective: checks that `o` is an error of the expected type with the same kind and message
/// on every rank, and that the message contains every string of `must_contain`.
inline void expect_same_error(const Outcome& o, const char* type_name,
                              const std::vector<std::string>& must_contain) {
    EXPECT_TRUE(o.threw) << "rank " << rank() << ": expected " << type_name << ", nothing thrown";
    EXPECT_TRUE(o.right_type) << "rank " << rank() << ": expected " << type_name << ", got kind "
                              << o.kind << ": " << o.message;
    for (const auto& s : must_contain) {
        EXPECT_NE(o.message.find(s), std::string::npos)
            << "rank " << rank() << ": message lacks '" << s << "': " << o.message;
    }
    EXPECT_TRUE(same_on_all_ranks(static_cast<std::uint64_t>(o.kind + 16)))
        << "error kinds differ across ranks; rank " << rank() << " has " << o.kind;
    EXPECT_TRUE(same_on_all_ranks(fnv(o.message)))
        << "messages differ across ranks; rank " << rank() << ": " << o.message;
}

#define H5T_EXPECT_SAME_ERROR(Type, call, ...) \
    ::h5t::expect_same_error(::h5t::catch_error<Type>([&] { call; }), #Type, {__VA_ARGS__})

}  // namespace h5t
