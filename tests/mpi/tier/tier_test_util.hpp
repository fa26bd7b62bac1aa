#pragma once
// Helpers of the memory-tier tests: generated TFRecord files whose every record is known from
// its id (the generator is the independent truth), and one collective epoch check.
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "h5t_mpi.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tf_example.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/example_codec.hpp"
#include "sources/tfrecord/framing.hpp"

namespace tier_test {

using namespace mpistage;

/// Payload bytes of record `id`: lengths 0..298 (zero-length ones included), id-dependent.
inline std::vector<std::uint8_t> payload(std::uint64_t id) {
    std::vector<std::uint8_t> p((id * 37) % 299);
    for (std::size_t j = 0; j < p.size(); ++j) p[j] = static_cast<std::uint8_t>(id * 131 + j * 7);
    return p;
}

/// The 4-byte "image" feature of record `id`.
inline std::array<std::uint8_t, 4> image_of(std::uint64_t id) {
    return {static_cast<std::uint8_t>(id), static_cast<std::uint8_t>(id >> 8), 7,
            static_cast<std::uint8_t>(id * 3)};
}

/// True when slot `s` of ragged field `f` holds exactly `payload(id)`.
inline bool ragged_is_payload(const HostField& f, std::size_t s, std::uint64_t id) {
    const auto want = payload(id);
    const auto len = static_cast<std::size_t>(f.offsets[s + 1] - f.offsets[s]);
    return len == want.size() &&
           (len == 0 || std::memcmp(f.data + f.offsets[s], want.data(), len) == 0);
}

/// A tf.train.Example for `id`: "image" 4 bytes, "label" int64, "text" ragged bytes.
inline std::vector<std::uint8_t> example(std::uint64_t id) {
    const auto image = image_of(id);
    const auto text = payload(id);
    return ExampleBuilder()
        .add_bytes("image", image.data(), image.size())
        .add_int64s("label", {static_cast<std::int64_t>(id) * 1000 - 5})
        .add_bytes("text", text.data(), text.size())
        .serialize();
}

/// Collective: rank 0 writes `n` records made by `make` to `path`.
inline void write_records(const std::string& path, std::uint64_t n,
                          const std::function<std::vector<std::uint8_t>(std::uint64_t)>& make) {
    if (h5t::rank() == 0) {
        std::vector<std::uint8_t> out;
        for (std::uint64_t id = 0; id < n; ++id) {
            const auto p = make(id);
            tfrecord::append_record(out, p.data(), p.size());
        }
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(out.data()),
                   static_cast<std::streamsize>(out.size()));
    }
    h5t::barrier();
}

/// What one epoch yielded on this rank.
struct Yield {
    std::vector<std::int64_t> valid_ids;
    std::uint64_t batches = 0;
    std::uint64_t bad_slots = 0;
    std::string error;
};

/// Consumes epoch `e` of `loader`, checking every slot with a real id by `slot_ok`, sleeping
/// `compute` after each batch (as a trainer's step would).
inline Yield consume(Loader& loader, std::uint64_t e,
                     const std::function<bool(const HostBatch&, std::size_t slot)>& slot_ok,
                     std::chrono::microseconds compute = std::chrono::microseconds(0)) {
    Yield y;
    try {
        for (const HostBatch& b : loader.epoch(e)) {
            ++y.batches;
            for (std::size_t s = 0; s < b.size(); ++s) {
                if (b.valid()[s]) y.valid_ids.push_back(b.index()[s]);
                if (b.index()[s] >= 0 && !slot_ok(b, s)) ++y.bad_slots;
            }
            if (compute.count() > 0) std::this_thread::sleep_for(compute);
        }
    } catch (const std::exception& ex) {
        y.error = ex.what();
    }
    return y;
}

/// Collective: no error, equal steps, every valid id once, all ids under pad/mask.
inline void expect_exactly_once(const Loader& loader, const Yield& y, std::uint64_t n, bool all_ids,
                                const std::string& what) {
    EXPECT_EQ(y.error, "") << what;
    EXPECT_EQ(y.bad_slots, 0u) << what;
    EXPECT_TRUE(h5t::same_on_all_ranks(y.batches)) << what;
    EXPECT_EQ(y.batches, loader.totals().steps) << what;
    const auto all = h5t::allgatherv(y.valid_ids);
    const std::set<std::int64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(distinct.size(), all.size()) << what << ": a sample was yielded twice";
    EXPECT_EQ(all.size(), loader.totals().valid_samples) << what;
    if (all_ids) EXPECT_EQ(all.size(), n) << what;
}

}  // namespace tier_test
