/// @file
/// Resume (issue "Fault recovery"): a plan that starts at a saved point continues exactly the
/// remaining sequence. Simulated worlds up to W = 1024; every resume step k of small epochs
/// into W' ∈ {1, 2, 3, 4, 7}; k = 0, k = steps and N < W included. The expected sets are
/// built from the full plans at the saving world size, never from the resumed planner.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"

namespace {

using mpistage::EpochPlan;
using mpistage::EpochStart;
using mpistage::PlanOptions;
using mpistage::Remainder;
using mpistage::Sharding;
using mpistage::Shuffle;

PlanOptions global_options(std::uint64_t b, Remainder rem, Shuffle shuffle) {
    PlanOptions o;
    o.batch_size = b;
    o.seed = 11;
    o.sharding = Sharding::global;
    o.shuffle = shuffle;
    o.remainder = rem;
    return o;
}

/// Valid ids of batches [from, to) of every rank of a world, in (step, rank, slot) order.
std::vector<std::int64_t> valid_in_steps(const std::vector<EpochPlan>& world, std::uint64_t from,
                                         std::uint64_t to) {
    std::vector<std::int64_t> out;
    for (std::uint64_t s = from; s < to; ++s) {
        for (const EpochPlan& p : world) {
            for (std::uint64_t j = 0; j < p.batch_size; ++j) {
                const std::uint64_t k = s * p.batch_size + j;
                if (p.valid[k]) out.push_back(p.ids[k]);
            }
        }
    }
    return out;
}

std::vector<EpochPlan> world_plan(std::uint64_t n, int w, const PlanOptions& o, std::uint64_t e,
                                  const EpochStart& start = {}) {
    std::vector<EpochPlan> world;
    for (int r = 0; r < w; ++r) world.push_back(mpistage::plan_epoch(n, w, r, o, e, start));
    return world;
}

TEST(PlanResume, GlobalSequenceAtW1IsTheConcatenationOfSlicesUpTo1024Ranks) {
    for (const Shuffle shuffle : {Shuffle::none, Shuffle::global}) {
        for (const std::uint64_t n : {1ull, 5ull, 1000ull, 4099ull}) {
            const PlanOptions o1 = global_options(1, Remainder::mask, shuffle);
            const std::vector<std::int64_t> ref = mpistage::plan_epoch(n, 1, 0, o1, 3).ids;
            for (const int w : {2, 3, 7, 64, 1024}) {
                for (const std::uint64_t b : {1ull, 3ull}) {
                    const auto world = world_plan(n, w, global_options(b, Remainder::mask, shuffle), 3);
                    const auto seq = valid_in_steps(world, 0, world[0].steps);
                    EXPECT_EQ(seq, ref) << "N=" << n << " W=" << w << " B=" << b;
                }
            }
        }
    }
}

// Resume from every step k at W into W': the consumed part (first k batches at W) and the
// resumed plan at W' are disjoint and together give what the epoch must give.
void check_elastic(std::uint64_t n, int w, std::uint64_t b, Remainder rem, Shuffle shuffle) {
    const PlanOptions o = global_options(b, rem, shuffle);
    const auto full = world_plan(n, w, o, 5);
    const std::uint64_t steps = full[0].steps;
    // What an uninterrupted epoch at W=1 with mask yields: the epoch order.
    const auto order = mpistage::plan_epoch(n, 1, 0, global_options(1, Remainder::mask, shuffle), 5).ids;
    for (std::uint64_t k = 0; k <= steps; ++k) {
        const auto consumed = valid_in_steps(full, 0, k);
        const std::uint64_t position = consumed.size();  // valid positions consumed
        for (const int w2 : {1, 2, 3, 4, 7}) {
            const std::string at = "N=" + std::to_string(n) + " W=" + std::to_string(w) +
                                   " B=" + std::to_string(b) + " " + mpistage::to_string(rem) +
                                   " k=" + std::to_string(k) + " W'=" + std::to_string(w2);
            const auto resumed = world_plan(n, w2, o, 5, {k, position});
            for (const EpochPlan& p : resumed) {
                ASSERT_EQ(p.steps, resumed[0].steps) << at;
                ASSERT_EQ(p.ids.size(), p.steps * b) << at;
                ASSERT_EQ(p.first_step, k) << at;
            }
            auto all = consumed;
            const auto rest = valid_in_steps(resumed, 0, resumed[0].steps);
            all.insert(all.end(), rest.begin(), rest.end());
            const std::set<std::int64_t> unique(all.begin(), all.end());
            ASSERT_EQ(unique.size(), all.size()) << at << ": a sample twice";
            if (rem == Remainder::drop) {
                // The consumed prefix, then the kept prefix of the rest of the order.
                const std::uint64_t width = static_cast<std::uint64_t>(w2) * b;
                const std::uint64_t kept = position + (n - position) / width * width;
                ASSERT_EQ(all, std::vector<std::int64_t>(order.begin(), order.begin() + kept)) << at;
            } else {
                ASSERT_EQ(all, order) << at << ": not every sample exactly once";
            }
        }
    }
}

TEST(PlanResume, GlobalResumeFromEveryStepIntoOtherWorldSizesGivesTheComplement) {
    for (const Remainder rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
        for (const Shuffle shuffle : {Shuffle::none, Shuffle::global}) {
            check_elastic(50, 4, 3, rem, shuffle);
            check_elastic(37, 3, 2, rem, shuffle);
            check_elastic(3, 7, 1, rem, shuffle);   // N < W
            check_elastic(1, 2, 4, rem, shuffle);
            check_elastic(64, 4, 4, rem, shuffle);  // divisible
        }
    }
}

// Same W: the resumed plan is exactly the rest of the uninterrupted plan, slot for slot
// (padding included), for both shardings.
TEST(PlanResume, SameWorldSizeResumeIsTheRestOfTheUninterruptedPlan) {
    for (const Sharding sharding : {Sharding::global, Sharding::byte_range}) {
        for (const Remainder rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
            for (const std::uint64_t n : {1ull, 10ull, 53ull, 200ull}) {
                for (const int w : {1, 3, 4}) {
                    PlanOptions o = global_options(3, rem, Shuffle::none);
                    o.sharding = sharding;
                    o.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
                    const auto full = world_plan(n, w, o, 2);
                    const std::uint64_t steps = full[0].steps;
                    for (std::uint64_t k = 0; k <= steps; ++k) {
                        const std::uint64_t position = valid_in_steps(full, 0, k).size();
                        for (int r = 0; r < w; ++r) {
                            const EpochPlan p = mpistage::plan_epoch(n, w, r, o, 2, {k, position});
                            const auto skip = static_cast<std::ptrdiff_t>(k * 3);
                            EXPECT_EQ(p.steps, steps - k);
                            EXPECT_EQ(p.ids, std::vector<std::int64_t>(full[r].ids.begin() + skip,
                                                                       full[r].ids.end()))
                                << mpistage::to_string(sharding) << " N=" << n << " W=" << w
                                << " r=" << r << " k=" << k;
                            EXPECT_EQ(p.valid, std::vector<std::uint8_t>(
                                                   full[r].valid.begin() + skip, full[r].valid.end()));
                        }
                    }
                }
            }
        }
    }
}

TEST(PlanResume, TotalsOfTheRemainingPartAndResumePointsOutsideTheEpoch) {
    PlanOptions o = global_options(4, Remainder::mask, Shuffle::global);
    const auto t = mpistage::plan_totals(100, 3, o, {2, 24});
    EXPECT_EQ(t.valid_samples, 76u);
    EXPECT_EQ(t.steps, 7u);  // ceil(76 / 12)
    EXPECT_EQ(t.padding_slots, 7u * 12u - 76u);
    EXPECT_EQ(mpistage::plan_totals(100, 3, o, {9, 100}).steps, 0u);
    EXPECT_THROW((void)mpistage::plan_totals(100, 3, o, {0, 101}), mpistage::ConfigError);
    o.sharding = Sharding::byte_range;
    o.shuffle = Shuffle::local;
    const auto full = mpistage::plan_totals(100, 3, o);
    EXPECT_THROW((void)mpistage::plan_totals(100, 3, o, {full.steps + 1, 0}), mpistage::ConfigError);
    EXPECT_EQ(mpistage::plan_totals(100, 3, o, {full.steps, 0}).steps, 0u);
}

}  // namespace
