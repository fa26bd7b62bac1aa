// Properties of the dynamic (byte/token budget) planner for files, simulating every rank of
// worlds of 1..64 ranks with heavy-tailed sample sizes: every batch within budget or a single
// flagged oversize sample, equal steps, every sample exactly once, deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mpistage/dynamic_plan.hpp"
#include "mpistage/error.hpp"
#include "mpistage/hash.hpp"

namespace {

using namespace mpistage;

/// Heavy-tailed (Pareto, alpha 1.2) sizes from a hash of the id: most samples small, a few
/// far over any budget below.
DynamicSampleCost pareto(std::uint64_t id) {
    const double u = (static_cast<double>(mix64(id ^ 0x5eedULL) >> 11) + 1.0) / 9007199254740993.0;
    const auto bytes = static_cast<std::uint64_t>(std::min(64.0 / std::pow(u, 1.0 / 1.2), 1e7));
    return DynamicSampleCost{bytes, bytes / 4};
}

/// `pareto`, tabulated (the sweeps call it millions of times).
DynamicSampleCost heavy_tailed(std::uint64_t id) {
    static const std::vector<DynamicSampleCost> table = [] {
        std::vector<DynamicSampleCost> t(32768);
        for (std::uint64_t i = 0; i < t.size(); ++i) t[i] = pareto(i);
        return t;
    }();
    return id < table.size() ? table[id] : pareto(id);
}

struct Sweep {
    Sharding sharding;
    Shuffle shuffle;
    std::uint64_t bucket_window;
};

/// Checks one world: equal steps, budget, exactly once, totals. Returns every rank's plan.
std::vector<DynamicEpochPlan> check_world(std::uint64_t n, int w, const PlanOptions& plan,
                                          const DynamicBatchOptions& o, std::uint64_t epoch) {
    std::vector<DynamicEpochPlan> plans;
    std::vector<int> seen(n, 0);
    std::uint64_t real_batches = 0;
    std::uint64_t oversize = 0;
    for (int r = 0; r < w; ++r) {
        plans.push_back(plan_dynamic_epoch(n, w, r, plan, o, epoch, heavy_tailed));
        const DynamicEpochPlan& p = plans.back();
        EXPECT_EQ(p.steps, plans.front().steps) << "W=" << w << " rank " << r;
        EXPECT_LE(p.batches.size(), p.steps);
        real_batches += p.batches.size();
        for (const DynamicBatch& b : p.batches) {
            std::uint64_t bytes = 0;
            std::uint64_t longest = 0;
            EXPECT_FALSE(b.ids.empty());
            EXPECT_LE(b.ids.size(), o.max_batch_samples);
            for (std::uint64_t id : b.ids) {
                EXPECT_LT(id, n);
                if (id >= n) continue;
                ++seen[id];
                bytes += heavy_tailed(id).size_bytes;
                longest = std::max(longest, heavy_tailed(id).tokens);
            }
            EXPECT_EQ(b.size_bytes, bytes);
            const bool over = (o.batch_bytes > 0 && bytes > o.batch_bytes) ||
                              (o.batch_tokens > 0 && longest * b.ids.size() > o.batch_tokens);
            EXPECT_EQ(b.oversize, over) << "W=" << w << " rank " << r;
            if (over) EXPECT_EQ(b.ids.size(), 1u) << "an over-budget batch holds one sample";
            oversize += b.oversize ? 1 : 0;
        }
    }
    std::uint64_t longest_rank = 0;
    for (const auto& p : plans)
        longest_rank = std::max<std::uint64_t>(longest_rank, p.batches.size());
    EXPECT_EQ(plans.front().steps, longest_rank) << "no step is padding on every rank";
    EXPECT_EQ(plans.front().total_batches, real_batches);
    EXPECT_EQ(plans.front().total_oversize, oversize);
    EXPECT_EQ(plans.front().total_padding_steps, plans.front().steps * w - real_batches);
    for (std::uint64_t id = 0; id < n; ++id) {
        EXPECT_EQ(seen[id], 1) << "sample " << id << " W=" << w;
        if (seen[id] != 1) break;
    }
    return plans;
}

TEST(DynamicPlan, HeavyTailedEqualStepsExactlyOnceWithinBudgetW1To64) {
    const std::vector<Sweep> sweeps = {{Sharding::byte_range, Shuffle::none, 0},
                                       {Sharding::byte_range, Shuffle::local, 4},
                                       {Sharding::global, Shuffle::global, 0},
                                       {Sharding::global, Shuffle::global, 8}};
    DynamicBatchOptions o;
    o.batch_bytes = 4096;
    o.max_batch_samples = 64;
    for (const Sweep& s : sweeps) {
        PlanOptions plan;
        plan.sharding = s.sharding;
        plan.shuffle = s.shuffle;
        plan.seed = 7;
        o.bucket_window = s.bucket_window;
        for (int w = 1; w <= 64; ++w) {
            SCOPED_TRACE("W=" + std::to_string(w) + " bucket " + std::to_string(s.bucket_window));
            const auto plans = check_world(1500, w, plan, o, 3);
            EXPECT_GT(plans.front().total_oversize, 0u) << "heavy tail reaches over the budget";
        }
    }
}

TEST(DynamicPlan, TokenBudgetAndFewerSamplesThanRanks) {
    DynamicBatchOptions o;
    o.batch_tokens = 2048;
    o.max_batch_samples = 1000;
    PlanOptions plan;
    for (int w : {1, 2, 3, 4, 7, 16, 64}) {
        check_world(5, w, plan, o, 0);
        check_world(777, w, plan, o, 1);
    }
}

TEST(DynamicPlan, DeterministicInSeedAndEpoch) {
    DynamicBatchOptions o;
    o.batch_bytes = 2000;
    PlanOptions plan;
    plan.sharding = Sharding::global;
    plan.shuffle = Shuffle::global;
    plan.seed = 11;
    auto ids_of = [&](std::uint64_t epoch, int rank) {
        std::vector<std::uint64_t> ids;
        for (const auto& b :
             plan_dynamic_epoch(900, 3, rank, plan, o, epoch, heavy_tailed).batches) {
            ids.insert(ids.end(), b.ids.begin(), b.ids.end());
        }
        return ids;
    };
    EXPECT_EQ(ids_of(2, 1), ids_of(2, 1));
    EXPECT_NE(ids_of(2, 1), ids_of(3, 1));
    // global sharding: batch k is rank k mod W's, and the batches do not depend on W
    const auto one = plan_dynamic_epoch(900, 1, 0, plan, o, 2, heavy_tailed);
    const auto three = plan_dynamic_epoch(900, 3, 1, plan, o, 2, heavy_tailed);
    ASSERT_GE(one.batches.size(), 2u);
    EXPECT_EQ(three.batches.at(0).ids, one.batches.at(1).ids);
}

TEST(DynamicPlan, PaddingWasteByHand) {
    // sizes 10, 2, 5 in one batch: longest 10 × 3 slots = 30, sum 17, padding 13.
    const std::vector<std::uint64_t> sizes = {10, 2, 5};
    const DynamicCostFn cost = [&](std::uint64_t id) {
        return DynamicSampleCost{sizes.at(id), sizes.at(id)};
    };
    DynamicBatchOptions o;
    o.batch_bytes = 100;
    const auto batches = pack_dynamic_batches({0, 1, 2}, o, cost);
    ASSERT_EQ(batches.size(), 1u);
    const PaddingWaste w = padding_waste(batches, o, cost);
    EXPECT_EQ(w.slot_units, 30u);
    EXPECT_EQ(w.padded_units, 13u);
    EXPECT_DOUBLE_EQ(w.ratio(), 13.0 / 30.0);
    // budget 12: {10, 2} then {5}; budget 9: {10} is oversize, then {2, 5}
    o.batch_bytes = 12;
    EXPECT_EQ(pack_dynamic_batches({0, 1, 2}, o, cost).size(), 2u);
    o.batch_bytes = 9;
    const auto small = pack_dynamic_batches({0, 1, 2}, o, cost);
    ASSERT_EQ(small.size(), 2u);
    EXPECT_TRUE(small[0].oversize);
    EXPECT_EQ(small[1].ids, (std::vector<std::uint64_t>{1, 2}));
    EXPECT_FALSE(small[1].oversize);
}

TEST(DynamicPlan, BucketingReducesPaddingWaste) {
    DynamicBatchOptions o;
    o.batch_bytes = 8192;
    o.bucket_window = 16;
    PlanOptions plan;
    const auto p = plan_dynamic_epoch(20000, 2, 0, plan, o, 0, heavy_tailed);
    EXPECT_LT(p.waste.ratio(), p.unbucketed_waste.ratio());
    o.bucket_window = 0;
    const auto q = plan_dynamic_epoch(20000, 2, 0, plan, o, 0, heavy_tailed);
    EXPECT_EQ(q.waste.padded_units, q.unbucketed_waste.padded_units);
    EXPECT_EQ(q.waste.padded_units, p.unbucketed_waste.padded_units);
}

TEST(DynamicPlan, ConfigErrors) {
    PlanOptions plan;
    DynamicBatchOptions none;
    EXPECT_THROW(plan_dynamic_epoch(10, 1, 0, plan, none, 0, heavy_tailed), ConfigError);
    DynamicBatchOptions o;
    o.batch_bytes = 10;
    EXPECT_THROW(plan_dynamic_epoch(0, 1, 0, plan, o, 0, heavy_tailed), ConfigError);
    EXPECT_THROW(plan_dynamic_epoch(10, 2, 2, plan, o, 0, heavy_tailed), ConfigError);
    o.max_batch_samples = 0;
    EXPECT_THROW(o.validate(), ConfigError);
}

}  // namespace
