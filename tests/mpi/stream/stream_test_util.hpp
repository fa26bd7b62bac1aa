#pragma once
// Shared helpers of the stream loader MPI tests: a deterministic generator of sub-streams with
// heavy-tailed ragged payloads, a consumer that checks every batch, and the cross-rank checks
// (exactly once, equal steps).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "h5t_mpi.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/stream.hpp"

namespace stream_test {

using namespace mpistage;

/// Payload length of item (s, p): mostly small, one in 50 large (heavy tail).
inline std::uint64_t payload_len(std::uint64_t s, std::uint64_t p) {
    const std::uint64_t u = mix64(s * 1000003 + p + 17);
    return u % 50 == 0 ? 1000 + (u >> 8) % 9000 : (u >> 8) % 100;
}
inline std::byte payload_byte(std::int64_t id, std::uint64_t j) {
    return static_cast<std::byte>((static_cast<std::uint64_t>(id) * 31 + j) & 0xff);
}

/// Fields: "id" (int64 scalar, the item id) and "payload" (ragged uint8).
inline std::vector<FieldInfo> test_fields() {
    FieldInfo id{"id", DType::int64, {}, 8, false};
    FieldInfo payload{"payload", DType::uint8, {}, 0, true};
    return {id, payload};
}

/// Streams with the given lengths; stream `fail_stream` throws at item `fail_at`.
inline CallableStreamSource make_source(const std::vector<std::uint64_t>& lengths,
                                        std::int64_t fail_stream = -1, std::uint64_t fail_at = 0,
                                        std::vector<double> weights = {}) {
    auto make = [lengths, fail_stream, fail_at](std::size_t s) {
        std::uint64_t p = 0;
        return CallableStreamSource::Generator([=](StreamSample& out) mutable {
            if (p >= lengths[s]) return false;
            if (static_cast<std::int64_t>(s) == fail_stream && p == fail_at) {
                throw IoError("camera " + std::to_string(s) + " lost at frame " +
                              std::to_string(p));
            }
            const std::int64_t id = stream_item_id(s, p);
            out.fields.resize(2);
            out.fields[0].resize(8);
            std::memcpy(out.fields[0].data(), &id, 8);
            out.fields[1].resize(payload_len(s, p));
            for (std::size_t j = 0; j < out.fields[1].size(); ++j) {
                out.fields[1][j] = payload_byte(id, j);
            }
            out.key = static_cast<std::uint64_t>(id);
            ++p;
            return true;
        });
    };
    std::string fp = "test streams";
    for (auto l : lengths) fp += " " + std::to_string(l);
    return CallableStreamSource(test_fields(), lengths.size(), make, fp, std::move(weights));
}

/// A loader over streams with the pass of epoch `epoch` in flight, as a trainer holds them
/// (`Loader` + the `EpochRange` it iterates); `resume`: `Loader::restore` from that state, its
/// epoch continued. Collective construction.
class Stream {
public:
    Stream(CommRef comm, const StreamSource& source, LoaderOptions options,
           const LoaderState* resume = nullptr, std::uint64_t epoch = 0)
        : loader_(resume ? Loader::restore(comm, source, std::move(options), *resume)
                         : Loader(comm, source, std::move(options))),
          before_(resume ? resume->steps_consumed : 0) {
        range_.emplace(loader_.epoch(resume ? resume->epoch : epoch));
    }
    /// Collective: ends the pass in flight and starts epoch `e` (`Loader::epoch`).
    void epoch(std::uint64_t e) {
        range_.reset();
        before_ = 0;
        range_.emplace(loader_.epoch(e));
    }
    /// Collective: the next batch of the pass.
    bool next(HostBatch& b) { return range_->next(b); }
    /// Steps of the pass yielded so far (the resumed state's included).
    std::uint64_t steps() const { return before_ + range_->steps_done(); }
    bool last_oversize() const { return range_->last_oversize(); }
    LoaderState state() const { return loader_.state(); }
    const LoaderStats& stats() const { return loader_.stats(); }
    const LoaderOptions& options() const { return loader_.options(); }
    const Communicator& comm() const { return loader_.comm(); }
    Loader& loader() { return loader_; }
    EpochRange& range() { return *range_; }

private:
    Loader loader_;
    std::uint64_t before_;
    std::optional<EpochRange> range_;
};

/// The largest batch of a stream loader with these options (the budget's cap with a budget).
inline std::uint64_t max_batch(const LoaderOptions& o) {
    return o.plan.budget.active() ? o.plan.budget.max_batch_samples : o.plan.batch_size;
}

/// What one rank saw.
struct Seen {
    std::vector<std::int64_t> ids;
    std::uint64_t batches = 0;
    std::uint64_t bad_content = 0;  ///< items whose fields do not match the generator
    std::uint64_t over_budget = 0;  ///< batches over the budget that are not one flagged sample
    std::uint64_t bad_mask = 0;     ///< slot count / valid / index inconsistencies
};

/// Checks one batch against the generator and the options' limits.
inline void check_batch(const HostBatch& b, const LoaderOptions& options, bool last_oversize,
                        Seen& seen) {
    const BatchBudget& o = options.plan.budget;
    const bool budget = o.active();
    const std::uint64_t cap = max_batch(options);
    if (!budget && b.size() != cap) ++seen.bad_mask;
    if (b.size() == 0 || b.size() > cap) ++seen.bad_mask;
    const auto* ids = b.fields()[0].as<std::int64_t>();
    const std::int64_t* off = b.fields()[1].offsets;
    std::uint64_t bytes = 0, max_len = 0, valid = 0;
    for (std::size_t j = 0; j < b.size(); ++j) {
        if (!b.valid()[j]) {
            if (b.index()[j] != kPaddingId || off[j + 1] != off[j]) ++seen.bad_mask;
            continue;
        }
        ++valid;
        const std::int64_t id = b.index()[j];
        seen.ids.push_back(id);
        const auto len = static_cast<std::uint64_t>(off[j + 1] - off[j]);
        const std::uint64_t s = static_cast<std::uint64_t>(id) >> 40;
        const std::uint64_t p = static_cast<std::uint64_t>(id) & ((1ull << 40) - 1);
        bool ok = ids[j] == id && len == payload_len(s, p);
        for (std::uint64_t k = 0; ok && k < len; ++k) {
            ok = b.fields()[1].data[off[j] + static_cast<std::int64_t>(k)] == payload_byte(id, k);
        }
        seen.bad_content += ok ? 0 : 1;
        bytes += 8 + len;
        max_len = std::max(max_len, len);
    }
    if (valid != b.num_valid()) ++seen.bad_mask;
    const bool over = (o.batch_bytes > 0 && bytes > o.batch_bytes) ||
                      (o.batch_tokens > 0 && max_len * valid > o.batch_tokens);
    if (over && !(valid == 1 && last_oversize)) ++seen.over_budget;
}
inline void check_batch(const HostBatch& b, const Stream& loader, Seen& seen) {
    check_batch(b, loader.options(), loader.last_oversize(), seen);
}

/// Consumes the rest of `range` of a loader with `options` (up to `max_steps` batches, all
/// when 0), checking every batch.
inline Seen consume_range(EpochRange& range, const LoaderOptions& options,
                          std::uint64_t max_steps = 0) {
    Seen seen;
    HostBatch b;
    while ((max_steps == 0 || seen.batches < max_steps) && range.next(b)) {
        ++seen.batches;
        check_batch(b, options, range.last_oversize(), seen);
    }
    return seen;
}

/// Consumes up to `max_steps` batches (all when 0).
inline Seen consume(Stream& loader, std::uint64_t max_steps = 0) {
    Seen seen;
    HostBatch b;
    while ((max_steps == 0 || seen.batches < max_steps) && loader.next(b)) {
        ++seen.batches;
        check_batch(b, loader, seen);
    }
    return seen;
}

/// Collective over MPI_COMM_WORLD: every rank's ids, concatenated.
inline std::vector<std::int64_t> all_ids(const std::vector<std::int64_t>& mine) {
    return h5t::allgatherv(mine);
}

/// Every id of streams with `lengths`, ascending.
inline std::vector<std::int64_t> expected_ids(const std::vector<std::uint64_t>& lengths) {
    std::vector<std::int64_t> ids;
    for (std::size_t s = 0; s < lengths.size(); ++s) {
        for (std::uint64_t p = 0; p < lengths[s]; ++p) ids.push_back(stream_item_id(s, p));
    }
    return ids;
}

/// Collective: the minimum and maximum of `v` over ranks.
inline std::pair<std::uint64_t, std::uint64_t> min_max(std::uint64_t v) {
    const std::uint64_t lo = h5t::min(v);
    return {lo, h5t::max(v)};
}

/// Number of ranks of MPI_COMM_WORLD.
inline int world_size() {
    return h5t::size();
}

/// Collective: exactly once (sorted union equals `expected`), equal steps, and no bad batch.
inline void expect_exactly_once(const Seen& seen, const std::vector<std::int64_t>& expected,
                                const std::string& what) {
    auto all = all_ids(seen.ids);
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, expected) << what;
    const auto steps = min_max(seen.batches);
    EXPECT_EQ(steps.first, steps.second) << what << ": unequal steps";
    EXPECT_EQ(min_max(seen.bad_content).second, 0u) << what;
    EXPECT_EQ(min_max(seen.bad_mask).second, 0u) << what;
    EXPECT_EQ(min_max(seen.over_budget).second, 0u) << what;
}

}  // namespace stream_test
