/// @file
/// `global_step_ids` (the ids of every rank for one step, used by the two-phase reads) equals,
/// slice by slice, the plans `plan_epoch` gives each rank: plain, balanced and resumed plans.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"

namespace {

using namespace mpistage;

/// Varied sizes (zero included) so the balance moves samples between ranks.
std::uint64_t size_of(std::uint64_t id) {
    return (id * 37) % 299;
}

struct StepCase {
    std::uint64_t n;
    int w;
    std::uint64_t b;
    Remainder remainder;
    Shuffle shuffle;
    bool balance;
    std::uint64_t position;
};

std::string describe(const StepCase& c) {
    return "N=" + std::to_string(c.n) + " W=" + std::to_string(c.w) + " B=" + std::to_string(c.b) +
           " " + to_string(c.remainder) + " " + to_string(c.shuffle) +
           (c.balance ? " balanced" : "") + " from position " + std::to_string(c.position);
}

/// Checks every step of epoch `e` against the W per-rank plans; returns the mismatches.
std::uint64_t mismatches(const StepCase& c, std::uint64_t e) {
    PlanOptions o;
    o.batch_size = c.b;
    o.seed = 11;
    o.sharding = Sharding::global;
    o.shuffle = c.shuffle;
    o.remainder = c.remainder;
    o.balance_steps = c.balance;
    const SampleBytesFn sizes = c.balance ? SampleBytesFn(size_of) : SampleBytesFn();
    const EpochStart start{0, c.position};
    std::vector<EpochPlan> plans;
    for (int r = 0; r < c.w; ++r) plans.push_back(plan_epoch(c.n, c.w, r, o, e, start, sizes));
    std::uint64_t bad = 0;
    for (std::uint64_t s = 0; s < plans[0].steps; ++s) {
        const auto ids = global_step_ids(c.n, c.w, o, e, start, s, sizes);
        if (ids.size() != static_cast<std::size_t>(c.w) * c.b) return ++bad;
        for (int r = 0; r < c.w; ++r) {
            for (std::uint64_t j = 0; j < c.b; ++j) {
                bad += ids[static_cast<std::uint64_t>(r) * c.b + j] !=
                       plans[static_cast<std::size_t>(r)].ids[s * c.b + j];
            }
        }
    }
    return bad;
}

TEST(PlanStepIds, EqualsEveryRanksPlan) {
    std::uint64_t cases = 0;
    for (const std::uint64_t n : {1u, 5u, 26u, 209u, 922u}) {
        for (const int w : {1, 2, 3, 4, 7}) {
            for (const std::uint64_t b : {1u, 3u, 8u}) {
                for (const Remainder rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
                    for (const Shuffle sh : {Shuffle::none, Shuffle::global}) {
                        for (const bool balance : {false, true}) {
                            for (const std::uint64_t pos : {std::uint64_t{0}, n / 3}) {
                                const StepCase c{n, w, b, rem, sh, balance, pos};
                                for (std::uint64_t e = 0; e < 2; ++e) {
                                    EXPECT_EQ(mismatches(c, e), 0u)
                                        << describe(c) << " epoch " << e;
                                    ++cases;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    EXPECT_EQ(cases, 5u * 5 * 3 * 3 * 2 * 2 * 2 * 2);
}

TEST(PlanStepIds, RejectsByteRangeMissingSizesAndStepsPastTheEnd) {
    PlanOptions o;
    o.batch_size = 4;
    o.sharding = Sharding::global;
    o.shuffle = Shuffle::global;
    o.remainder = Remainder::drop;
    // 100 samples, W=2, B=4: 12 full steps.
    EXPECT_EQ(global_step_ids(100, 2, o, 0, {}, 11).size(), 8u);
    EXPECT_THROW(global_step_ids(100, 2, o, 0, {}, 12), ConfigError);
    PlanOptions balanced = o;
    balanced.balance_steps = true;
    EXPECT_THROW(global_step_ids(100, 2, balanced, 0, {}, 0), ConfigError);
    PlanOptions byte_range = o;
    byte_range.sharding = Sharding::byte_range;
    byte_range.shuffle = Shuffle::none;
    EXPECT_THROW(global_step_ids(100, 2, byte_range, 0, {}, 0), ConfigError);
}

}  // namespace
