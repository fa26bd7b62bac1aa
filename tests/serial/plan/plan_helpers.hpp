#pragma once
/// @file
/// Helpers shared by the serial planner tests: simulate every rank of a world by calling the pure
/// planner once per rank, and report property violations without flooding the output.

#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/plan.hpp"

namespace mpistage_test_plan {

/// A (sharding, shuffle) pair that validate() accepts.
struct Mode {
    mpistage::Sharding sharding;
    mpistage::Shuffle shuffle;
};

/// One point of the property sweep.
struct Case {
    std::uint64_t num_samples = 0;
    int world_size = 1;
    std::uint64_t batch_size = 1;
    mpistage::Remainder remainder = mpistage::Remainder::drop;
    Mode mode{mpistage::Sharding::byte_range, mpistage::Shuffle::none};
    std::uint64_t seed = 0;
};

/// The case of N samples, W ranks, batch size B, remainder, mode and seed.
inline Case make_case(std::uint64_t n, int w, std::uint64_t b, mpistage::Remainder rem, Mode mode,
                      std::uint64_t seed = 0) {
    Case c;
    c.num_samples = n;
    c.world_size = w;
    c.batch_size = b;
    c.remainder = rem;
    c.mode = mode;
    c.seed = seed;
    return c;
}

inline mpistage::PlanOptions options_of(const Case& c) {
    mpistage::PlanOptions o;
    o.batch_size = c.batch_size;
    o.seed = c.seed;
    o.sharding = c.mode.sharding;
    o.shuffle = c.mode.shuffle;
    o.remainder = c.remainder;
    if (c.mode.shuffle == mpistage::Shuffle::chunks) {  // small, so windows and tails abound
        o.chunk_samples = 3;
        o.window_chunks = 2;
    }
    return o;
}

inline std::string describe(const Case& c) {
    std::ostringstream s;
    s << "N=" << c.num_samples << " W=" << c.world_size << " B=" << c.batch_size
      << " remainder=" << mpistage::to_string(c.remainder)
      << " sharding=" << mpistage::to_string(c.mode.sharding)
      << " shuffle=" << mpistage::to_string(c.mode.shuffle) << " seed=" << c.seed;
    return s.str();
}

inline std::string describe(const Case& c, std::uint64_t epoch) {
    return describe(c) + " epoch=" + std::to_string(epoch);
}

/// The plans of all ranks of one world for one epoch, as every rank would compute them.
struct WorldPlan {
    mpistage::EpochTotals totals;
    std::vector<mpistage::EpochPlan> ranks;
};

inline WorldPlan plan_world(const Case& c, std::uint64_t epoch) {
    const mpistage::PlanOptions o = options_of(c);
    WorldPlan wp;
    wp.totals = mpistage::plan_totals(c.num_samples, c.world_size, o);
    wp.ranks.reserve(static_cast<std::size_t>(c.world_size));
    for (int r = 0; r < c.world_size; ++r) {
        wp.ranks.push_back(mpistage::plan_epoch(c.num_samples, c.world_size, r, o, epoch));
    }
    return wp;
}

inline std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
    return (a + b - 1) / b;
}

/// Steps per epoch as the contract states them, computed independently of the planner:
/// byte_range: drop floor(floor(N/W)/B), pad/mask ceil(ceil(N/W)/B);
/// global:     drop floor(N/(W*B)),     pad/mask ceil(N/(W*B)).
inline std::uint64_t expected_steps(const Case& c) {
    const auto n = c.num_samples;
    const auto w = static_cast<std::uint64_t>(c.world_size);
    const auto b = c.batch_size;
    const bool drop = c.remainder == mpistage::Remainder::drop;
    if (c.mode.sharding == mpistage::Sharding::byte_range) {
        return drop ? (n / w) / b : ceil_div(ceil_div(n, w), b);
    }
    return drop ? n / (w * b) : ceil_div(n, w * b);
}

inline bool same_plan(const mpistage::EpochPlan& a, const mpistage::EpochPlan& b) {
    return a.steps == b.steps && a.batch_size == b.batch_size && a.ids == b.ids &&
           a.valid == b.valid && a.shard_begin == b.shard_begin && a.shard_end == b.shard_end;
}

inline bool same_totals(const mpistage::EpochTotals& a, const mpistage::EpochTotals& b) {
    return a.steps == b.steps && a.valid_samples == b.valid_samples &&
           a.padding_slots == b.padding_slots && a.dropped_samples == b.dropped_samples;
}

/// Sample ids of the valid slots of one rank, in yield order.
inline std::vector<std::int64_t> valid_ids(const mpistage::EpochPlan& p) {
    std::vector<std::int64_t> out;
    for (std::size_t k = 0; k < p.ids.size(); ++k) {
        if (p.valid[k]) out.push_back(p.ids[k]);
    }
    return out;
}

/// Global position of slot k of rank r under `global` sharding: step s = k / B takes positions
/// [s*W*B, (s+1)*W*B) of the epoch order and rank r takes its slice [r*B, (r+1)*B) of them;
/// with `Shuffle::chunks` (`strided`) its positions r + j*W of them instead.
inline std::uint64_t global_position(std::uint64_t k, int rank, int world_size,
                                     std::uint64_t batch_size, bool strided = false) {
    const std::uint64_t s = k / batch_size;
    const std::uint64_t j = k % batch_size;
    const auto w = static_cast<std::uint64_t>(world_size);
    const auto r = static_cast<std::uint64_t>(rank);
    return s * w * batch_size + (strided ? r + j * w : r * batch_size + j);
}

/// The (rank, slot) of global position p (the inverse of `global_position`).
inline std::pair<int, std::uint64_t> global_slot(std::uint64_t p, int world_size,
                                                 std::uint64_t batch_size, bool strided = false) {
    const auto w = static_cast<std::uint64_t>(world_size);
    const std::uint64_t s = p / (w * batch_size);
    const std::uint64_t i = p % (w * batch_size);
    if (strided) return {static_cast<int>(i % w), s * batch_size + i / w};
    return {static_cast<int>(i / batch_size), s * batch_size + i % batch_size};
}

/// Reports the first `max_reported` violations of a test as gtest failures and counts the rest,
/// so a broken planner gives a readable report instead of millions of lines.
class Violations {
public:
    explicit Violations(int max_reported = 15) : max_reported_(max_reported) {}
    /// Records a violation unless `ok`; returns `ok`.
    bool check(bool ok, const std::string& where, const std::string& what) {
        if (ok) return true;
        if (count_ < max_reported_) ADD_FAILURE() << where << ": " << what;
        ++count_;
        return false;
    }
    /// Like check(), but builds the message only on failure (for checks inside per-slot loops).
    template <typename MakeMessage>
    bool lazy_check(bool ok, MakeMessage&& make_message) {
        if (ok) return true;
        const Message m = make_message();
        return check(false, m.where, m.what);
    }
    struct Message {
        std::string where;
        std::string what;
    };
    static Message message(std::string where, std::string what) {
        return Message{std::move(where), std::move(what)};
    }
    long count() const noexcept { return count_; }

private:
    int max_reported_;
    long count_ = 0;
};

}  // namespace mpistage_test_plan
