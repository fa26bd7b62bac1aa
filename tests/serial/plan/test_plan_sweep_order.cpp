/// @file
/// Planner sweep (plan_sweep.hpp), order: the per-epoch order of shuffled and unshuffled plans,
/// and determinism (every rank computes the same totals, fingerprint and plan every time).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "plan_sweep.hpp"

namespace {

using mpistage::EpochPlan;
using mpistage::PlanOptions;
using mpistage::Sharding;
using namespace mpistage_test_plan;

// ---- order between epochs ---------------------------------------------------------------------

/// Natural log of the number of ordered selections of k out of `pool` (pool! / (pool-k)!): how
/// many different sequences a uniform shuffle could give.
double log_orders(std::uint64_t pool, std::uint64_t k) {
    if (k > pool) return 0.0;
    return std::lgamma(static_cast<double>(pool) + 1.0) -
           std::lgamma(static_cast<double>(pool - k) + 1.0);
}

// A shuffle is random: a 4-sample shard has only 24 orders, so two epochs of it coincide with
// probability 1/24 even for a perfect shuffle. The checks are therefore:
//  - a rank with >= 4 valid samples does not yield the same order in all 4 epochs;
//  - any sequence (one rank's, or the whole world's) that a uniform shuffle could produce in
//    at least 10^6 ways differs between every pair of epochs.
constexpr std::size_t kMinSamplesToDiffer = 4;
const double kLogManyOrders = std::log(1e6);

/// No shuffle: every epoch identical, in the documented ascending assignment.
void check_unshuffled_order(Violations& v, const Case& c, const std::vector<WorldPlan>& epochs,
                            const std::vector<std::uint64_t>& begins) {
    const std::string at = describe(c);
    for (int r = 0; r < c.world_size; ++r) {
        const auto ru = static_cast<std::size_t>(r);
        const std::string rat = at + " rank=" + std::to_string(r);
        for (std::uint64_t e = 1; e < kEpochs; ++e) {
            v.check(mpistage_test_plan::same_plan(epochs[e].ranks[ru], epochs[0].ranks[ru]), rat,
                    "shuffle none: epoch " + std::to_string(e) + " differs from 0");
        }
        const EpochPlan& p = epochs[0].ranks[ru];
        for (std::size_t k = 0; k < p.ids.size(); ++k) {
            if (!p.valid[k]) continue;
            const std::uint64_t want =
                c.mode.sharding == Sharding::byte_range
                    ? begins[ru] + k
                    : mpistage_test_plan::global_position(k, r, c.world_size, c.batch_size);
            if (!v.lazy_check(p.ids[k] == static_cast<std::int64_t>(want), [&] {
                    return v.message(rat, "shuffle none: slot " + std::to_string(k) + " holds " +
                                              std::to_string(p.ids[k]) + ", expected " +
                                              std::to_string(want));
                })) {
                break;
            }
        }
    }
}

/// Shuffle on, one rank whose valid ids per epoch are `ids` out of a pool of `pool` samples.
void check_rank_orders_differ(Violations& v, const std::string& rat,
                              const std::vector<std::vector<std::int64_t>>& ids,
                              std::uint64_t pool) {
    const std::uint64_t k = ids[0].size();
    if (k >= kMinSamplesToDiffer) {
        bool all_same = true;
        for (std::uint64_t e = 1; e < kEpochs; ++e) all_same = all_same && ids[e] == ids[0];
        v.check(!all_same, rat,
                "shuffle on: the same order in all " + std::to_string(kEpochs) + " epochs (" +
                    std::to_string(k) + " samples)");
    }
    if (log_orders(pool, k) >= kLogManyOrders) {
        for (std::uint64_t e1 = 0; e1 < kEpochs; ++e1) {
            for (std::uint64_t e2 = e1 + 1; e2 < kEpochs; ++e2) {
                v.check(ids[e1] != ids[e2], rat,
                        "shuffle on: epochs " + std::to_string(e1) + " and " + std::to_string(e2) +
                            " yield the same order (" + std::to_string(k) + " samples)");
            }
        }
    }
}

/// Shuffle on: per rank (check_rank_orders_differ) and for the whole world's sequence.
void check_shuffled_order(Violations& v, const Case& c, const std::vector<WorldPlan>& epochs,
                          const std::vector<std::uint64_t>& begins) {
    const std::string at = describe(c);
    // world[e]: the valid ids of all ranks in rank order, epoch e.
    std::vector<std::vector<std::int64_t>> world(kEpochs);
    double world_log_orders = 0.0;
    std::uint64_t world_valid = 0;
    for (int r = 0; r < c.world_size; ++r) {
        const auto ru = static_cast<std::size_t>(r);
        std::vector<std::vector<std::int64_t>> ids(kEpochs);
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            ids[e] = mpistage_test_plan::valid_ids(epochs[e].ranks[ru]);
            world[e].insert(world[e].end(), ids[e].begin(), ids[e].end());
        }
        const std::uint64_t k = ids[0].size();
        const std::uint64_t pool =
            c.mode.sharding == Sharding::byte_range ? begins[ru + 1] - begins[ru] : c.num_samples;
        world_valid += k;
        if (c.mode.sharding == Sharding::byte_range) world_log_orders += log_orders(pool, k);
        check_rank_orders_differ(v, at + " rank=" + std::to_string(r), ids, pool);
    }
    if (c.mode.sharding == Sharding::global) {
        world_log_orders = log_orders(c.num_samples, world_valid);
    }
    if (world_log_orders >= kLogManyOrders) {
        for (std::uint64_t e1 = 0; e1 < kEpochs; ++e1) {
            for (std::uint64_t e2 = e1 + 1; e2 < kEpochs; ++e2) {
                v.check(world[e1] != world[e2], at,
                        "shuffle on: epochs " + std::to_string(e1) + " and " + std::to_string(e2) +
                            " yield the same world order");
            }
        }
    }
}

TEST_P(PlanProperties, OrderBetweenEpochs) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const auto begins = mpistage::balanced_shard_begins(c.num_samples, c.world_size);
        std::vector<WorldPlan> epochs;
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            epochs.push_back(mpistage_test_plan::plan_world(c, e));
        }
        if (!mpistage_test_plan::shuffled(c.mode)) {
            check_unshuffled_order(v, c, epochs, begins);
        } else {
            check_shuffled_order(v, c, epochs, begins);
        }
    });
    EXPECT_EQ(v.count(), 0);
}

// ---- determinism ------------------------------------------------------------------------------

TEST_P(PlanProperties, DeterministicAndAgreedAcrossRanks) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const PlanOptions o = mpistage_test_plan::options_of(c);
        const auto totals = mpistage::plan_totals(c.num_samples, c.world_size, o);
        const auto fingerprint = mpistage::plan_fingerprint(c.num_samples, c.world_size, o);
        for (std::uint64_t e = 0; e < kEpochs; e += 3) {  // epochs 0 and 3
            const WorldPlan first = mpistage_test_plan::plan_world(c, e);
            const std::string at = describe(c, e);
            for (int r = 0; r < c.world_size; ++r) {
                const auto ru = static_cast<std::size_t>(r);
                const std::string rat = at + " rank=" + std::to_string(r);
                // Every rank computes the same totals and fingerprint (pure functions of the
                // agreed inputs) and, for a given rank, the same plan every time.
                v.check(mpistage_test_plan::same_totals(
                            mpistage::plan_totals(c.num_samples, c.world_size, o), totals),
                        rat, "plan_totals not deterministic");
                v.check(mpistage::plan_fingerprint(c.num_samples, c.world_size, o) == fingerprint,
                        rat, "plan_fingerprint not deterministic");
                const EpochPlan again = mpistage::plan_epoch(c.num_samples, c.world_size, r, o, e);
                v.check(mpistage_test_plan::same_plan(again, first.ranks[ru]), rat,
                        "plan_epoch gave a different plan on a second call");
            }
        }
    });
    EXPECT_EQ(v.count(), 0);
}

}  // namespace
