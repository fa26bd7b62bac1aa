// Properties of the budget (byte/token) planner, `plan_epoch` with `PlanOptions::budget`,
// simulating every rank of worlds of 1..64 ranks with heavy-tailed sample sizes: every batch
// within budget or a single flagged oversize sample, equal steps, every sample exactly once,
// deterministic; and resume: slot for slot at the same W, exactly once at another W (global).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"
#include "plan/budget_plan.hpp"
#include "plan/chunk_order.hpp"

namespace {

using namespace mpistage;
using detail::BudgetBatch;
using detail::SampleCost;

/// Heavy-tailed (Pareto, alpha 1.2) sizes from a hash of the id: most samples small, a few
/// far over any budget below.
SampleCost pareto(std::uint64_t id) {
    const double u = (static_cast<double>(mix64(id ^ 0x5eedULL) >> 11) + 1.0) / 9007199254740993.0;
    const auto bytes = static_cast<std::uint64_t>(std::min(64.0 / std::pow(u, 1.0 / 1.2), 1e7));
    return SampleCost{bytes, bytes / 4};
}

/// `pareto`, tabulated (the sweeps call it millions of times).
SampleCost heavy_tailed(std::uint64_t id) {
    static const std::vector<SampleCost> table = [] {
        std::vector<SampleCost> t(32768);
        for (std::uint64_t i = 0; i < t.size(); ++i) t[i] = pareto(i);
        return t;
    }();
    return id < table.size() ? table[id] : pareto(id);
}
std::uint64_t heavy_bytes(std::uint64_t id) {
    return heavy_tailed(id).size_bytes;
}
std::uint64_t heavy_tokens(std::uint64_t id) {
    return heavy_tailed(id).tokens;
}

EpochPlan plan_of(std::uint64_t n, int w, int r, const PlanOptions& o, std::uint64_t epoch,
                  const EpochStart& start = {}) {
    return plan_epoch(n, w, r, o, epoch, start, heavy_bytes, heavy_tokens);
}

/// Global sharding and shuffle under a byte budget.
PlanOptions global_budget(std::uint64_t seed, std::uint64_t batch_bytes, std::uint64_t window) {
    PlanOptions plan;
    plan.sharding = Sharding::global;
    plan.shuffle = Shuffle::global;
    plan.seed = seed;
    plan.budget.batch_bytes = batch_bytes;
    plan.budget.bucket_window = window;
    return plan;
}

/// The real (non-padding) batches of a plan, as id lists.
std::vector<std::vector<std::uint64_t>> real_batches(const EpochPlan& p) {
    std::vector<std::vector<std::uint64_t>> out;
    for (std::uint64_t s = 0; s < p.steps; ++s) {
        const std::uint64_t b = p.batch_begin(s);
        if (p.batch_slots(s) == 1 && p.valid[b] == 0) {
            EXPECT_EQ(p.ids[b], kPaddingId) << "a padding batch is one masked slot";
            continue;
        }
        EXPECT_EQ(out.size(), s) << "padding batches come after a rank's real ones";
        std::vector<std::uint64_t> ids;
        for (std::uint64_t k = b; k < p.batch_begin(s + 1); ++k) {
            EXPECT_EQ(p.valid[k], 1);
            ids.push_back(static_cast<std::uint64_t>(p.ids[k]));
        }
        out.push_back(std::move(ids));
    }
    return out;
}

struct Sweep {
    Sharding sharding;
    Shuffle shuffle;
    std::uint64_t bucket_window;
};

/// Checks one world: equal steps, budget, exactly once, totals. Returns every rank's plan.
std::vector<EpochPlan> check_world(std::uint64_t n, int w, const PlanOptions& plan,
                                   std::uint64_t epoch) {
    const BatchBudget& o = plan.budget;
    std::vector<EpochPlan> plans;
    std::vector<int> seen(n, 0);
    std::uint64_t real = 0;
    std::uint64_t oversize = 0;
    std::uint64_t largest = 0;
    for (int r = 0; r < w; ++r) {
        plans.push_back(plan_of(n, w, r, plan, epoch));
        const EpochPlan& p = plans.back();
        EXPECT_EQ(p.steps, plans.front().steps) << "W=" << w << " rank " << r;
        EXPECT_EQ(p.batch_offsets.size(), p.steps + 1);
        EXPECT_EQ(p.ids.size(), p.batch_begin(p.steps));
        const auto batches = real_batches(p);
        EXPECT_LE(batches.size(), p.steps);
        real += batches.size();
        for (std::size_t s = 0; s < batches.size(); ++s) {
            std::uint64_t bytes = 0;
            std::uint64_t longest = 0;
            EXPECT_FALSE(batches[s].empty());
            EXPECT_LE(batches[s].size(), o.max_batch_samples);
            largest = std::max<std::uint64_t>(largest, batches[s].size());
            for (std::uint64_t id : batches[s]) {
                EXPECT_LT(id, n);
                if (id >= n) continue;
                ++seen[id];
                bytes += heavy_tailed(id).size_bytes;
                longest = std::max(longest, heavy_tailed(id).tokens);
            }
            const bool over = (o.batch_bytes > 0 && bytes > o.batch_bytes) ||
                              (o.batch_tokens > 0 && longest * batches[s].size() > o.batch_tokens);
            EXPECT_EQ(p.batch_oversize(s), over) << "W=" << w << " rank " << r;
            if (over) EXPECT_EQ(batches[s].size(), 1u) << "an over-budget batch holds one sample";
            oversize += over ? 1 : 0;
        }
    }
    std::uint64_t longest_rank = 0;
    for (const auto& p : plans) {
        longest_rank = std::max<std::uint64_t>(longest_rank, real_batches(p).size());
    }
    const EpochPlan& f = plans.front();
    EXPECT_EQ(f.steps, longest_rank) << "no step is padding on every rank";
    EXPECT_EQ(f.budget.batches, real);
    EXPECT_EQ(f.budget.oversize_batches, oversize);
    EXPECT_EQ(f.budget.padding_steps, f.steps * w - real);
    EXPECT_EQ(f.totals.steps, f.steps);
    EXPECT_EQ(f.totals.valid_samples, n);
    EXPECT_EQ(f.totals.padding_slots, f.steps * w - real);
    EXPECT_EQ(f.batch_size, largest) << "ring slots hold the largest batch of any rank";
    EXPECT_EQ(f.job_samples_before.front(), 0u);
    EXPECT_EQ(f.job_samples_before.back(), n);
    for (std::uint64_t id = 0; id < n; ++id) {
        EXPECT_EQ(seen[id], 1) << "sample " << id << " W=" << w;
        if (seen[id] != 1) break;
    }
    return plans;
}

TEST(BudgetPlan, HeavyTailedEqualStepsExactlyOnceWithinBudgetW1To64) {
    const std::vector<Sweep> sweeps = {
        {Sharding::byte_range, Shuffle::none, 0}, {Sharding::byte_range, Shuffle::local, 4},
        {Sharding::global, Shuffle::global, 0},   {Sharding::global, Shuffle::global, 8},
        {Sharding::global, Shuffle::chunks, 0},   {Sharding::global, Shuffle::chunks, 8}};
    PlanOptions plan;
    plan.budget.batch_bytes = 4096;
    plan.budget.max_batch_samples = 64;
    for (const Sweep& s : sweeps) {
        plan.sharding = s.sharding;
        plan.shuffle = s.shuffle;
        plan.chunk_samples = s.shuffle == Shuffle::chunks ? 10 : 0;
        plan.window_chunks = s.shuffle == Shuffle::chunks ? 4 : 0;
        plan.seed = 7;
        plan.budget.bucket_window = s.bucket_window;
        for (int w = 1; w <= 64; ++w) {
            SCOPED_TRACE("W=" + std::to_string(w) + " bucket " + std::to_string(s.bucket_window));
            const auto plans = check_world(1500, w, plan, 3);
            EXPECT_GT(plans.front().budget.oversize_batches, 0u)
                << "heavy tail reaches over the budget";
        }
    }
}

TEST(BudgetPlan, PackedBatchesCarryTheirBytesAndAreTheGlobalPlansBatches) {
    const PlanOptions plan = global_budget(9, 4096, 4);
    const std::uint64_t n = 1500;
    std::vector<std::uint64_t> order(n);
    const Permutation perm(n, epoch_permutation_key(plan, 2, 0));
    for (std::uint64_t i = 0; i < n; ++i) order[i] = perm(i);
    const auto packed = detail::pack_budget_batches(order, plan.budget, heavy_tailed);
    for (const BudgetBatch& b : packed) {
        std::uint64_t bytes = 0;
        for (std::uint64_t id : b.ids) bytes += heavy_tailed(id).size_bytes;
        EXPECT_EQ(b.size_bytes, bytes);
    }
    for (int w : {1, 3, 4}) {
        for (int r = 0; r < w; ++r) {
            const auto mine = real_batches(plan_of(n, w, r, plan, 2));
            for (std::size_t i = 0; i < mine.size(); ++i) {
                EXPECT_EQ(
                    mine[i],
                    packed.at(i * static_cast<std::size_t>(w) + static_cast<std::size_t>(r)).ids)
                    << "W=" << w << ": batch k goes to rank k mod W";
            }
        }
    }
}

TEST(BudgetPlan, TokenBudgetAndFewerSamplesThanRanks) {
    PlanOptions plan;
    plan.budget.batch_tokens = 2048;
    plan.budget.max_batch_samples = 1000;
    for (int w : {1, 2, 3, 4, 7, 16, 64}) {
        check_world(5, w, plan, 0);
        check_world(777, w, plan, 1);
    }
}

TEST(BudgetPlan, DeterministicInSeedAndEpoch) {
    const PlanOptions plan = global_budget(11, 2000, 0);
    auto ids_of = [&](std::uint64_t epoch, int rank) {
        std::vector<std::uint64_t> ids;
        for (const auto& b : real_batches(plan_of(900, 3, rank, plan, epoch))) {
            ids.insert(ids.end(), b.begin(), b.end());
        }
        return ids;
    };
    EXPECT_EQ(ids_of(2, 1), ids_of(2, 1));
    EXPECT_NE(ids_of(2, 1), ids_of(3, 1));
    // global sharding: batch k is rank k mod W's, and the batches do not depend on W
    const auto one = real_batches(plan_of(900, 1, 0, plan, 2));
    const auto three = real_batches(plan_of(900, 3, 1, plan, 2));
    ASSERT_GE(one.size(), 2u);
    EXPECT_EQ(three.at(0), one.at(1));
}

TEST(BudgetPlan, PaddingWasteByHand) {
    // sizes 10, 2, 5 in one batch: longest 10 × 3 slots = 30, sum 17, padding 13.
    const std::vector<std::uint64_t> sizes = {10, 2, 5};
    const detail::SampleCostFn cost = [&](std::uint64_t id) {
        return SampleCost{sizes.at(id), sizes.at(id)};
    };
    BatchBudget o;
    o.batch_bytes = 100;
    const auto batches = detail::pack_budget_batches({0, 1, 2}, o, cost);
    ASSERT_EQ(batches.size(), 1u);
    const PaddingWaste w = detail::padding_waste(batches, o, cost);
    EXPECT_EQ(w.slot_units, 30u);
    EXPECT_EQ(w.padded_units, 13u);
    EXPECT_DOUBLE_EQ(w.ratio(), 13.0 / 30.0);
    // budget 12: {10, 2} then {5}; budget 9: {10} is oversize, then {2, 5}
    o.batch_bytes = 12;
    EXPECT_EQ(detail::pack_budget_batches({0, 1, 2}, o, cost).size(), 2u);
    o.batch_bytes = 9;
    const auto small = detail::pack_budget_batches({0, 1, 2}, o, cost);
    ASSERT_EQ(small.size(), 2u);
    EXPECT_TRUE(small[0].oversize);
    EXPECT_EQ(small[1].ids, (std::vector<std::uint64_t>{1, 2}));
    EXPECT_FALSE(small[1].oversize);
}

TEST(BudgetPlan, BucketingReducesPaddingWaste) {
    PlanOptions plan;
    plan.budget.batch_bytes = 8192;
    plan.budget.bucket_window = 16;
    const auto p = plan_of(20000, 2, 0, plan, 0);
    EXPECT_LT(p.budget.waste.ratio(), p.budget.unbucketed_waste.ratio());
    plan.budget.bucket_window = 0;
    const auto q = plan_of(20000, 2, 0, plan, 0);
    EXPECT_EQ(q.budget.waste.padded_units, q.budget.unbucketed_waste.padded_units);
    EXPECT_EQ(q.budget.waste.padded_units, p.budget.unbucketed_waste.padded_units);
}

TEST(BudgetPlan, ConfigErrors) {
    BatchBudget none;  // no budget: the packer refuses it
    EXPECT_THROW(detail::pack_budget_batches({0, 1}, none, heavy_tailed), ConfigError);
    PlanOptions plan;
    plan.budget.batch_bytes = 10;
    EXPECT_THROW(plan_of(0, 1, 0, plan, 0), ConfigError);
    EXPECT_THROW(plan_of(10, 2, 2, plan, 0), ConfigError);
    EXPECT_THROW(plan_epoch(10, 1, 0, plan, 0, {}), ConfigError) << "a budget needs the sizes";
    EXPECT_THROW(plan_totals(10, 1, plan), ConfigError) << "budget totals come with the plan";
    plan.sharding = Sharding::global;
    EXPECT_THROW(global_step_ids(10, 1, plan, 0, {}, 0, heavy_bytes), ConfigError);
    plan.balance_steps = true;
    EXPECT_THROW(plan.validate(), ConfigError);
    plan.balance_steps = false;
    plan.budget.batch_bytes = 0;
    plan.budget.batch_tokens = 10;
    EXPECT_THROW(plan_epoch(10, 1, 0, plan, 0, {}, heavy_bytes), ConfigError)
        << "a token budget needs the tokens";
    plan.budget.max_batch_samples = 0;
    EXPECT_THROW(plan.validate(), ConfigError);
}

/// Resume after `steps` steps at `w1` ranks, continue at `w2`: every sample exactly once over
/// both parts, and at w2 == w1 the remaining batches slot for slot.
void check_resume(const PlanOptions& plan, std::uint64_t n, int w1, int w2, std::uint64_t steps) {
    SCOPED_TRACE("W " + std::to_string(w1) + " -> " + std::to_string(w2) + " after " +
                 std::to_string(steps) + " steps");
    std::vector<int> seen(n, 0);
    std::vector<EpochPlan> first;
    for (int r = 0; r < w1; ++r) first.push_back(plan_of(n, w1, r, plan, 4));
    ASSERT_LT(steps, first.front().steps);
    for (const EpochPlan& p : first) {
        for (std::uint64_t k = 0; k < p.batch_begin(steps); ++k) {
            if (p.valid[k]) ++seen[static_cast<std::size_t>(p.ids[k])];
        }
    }
    const EpochStart start{steps, first.front().job_samples_before[steps],
                           plan.shuffle == Shuffle::chunks ? w1 : 0};
    std::uint64_t consumed = 0;
    for (int v : seen) consumed += static_cast<std::uint64_t>(v);
    EXPECT_EQ(start.position, consumed) << "the state's sample count";
    std::uint64_t rest_steps = 0;
    for (int r = 0; r < w2; ++r) {
        const EpochPlan p = plan_of(n, w2, r, plan, 4, start);
        if (r == 0) rest_steps = p.steps;
        EXPECT_EQ(p.steps, rest_steps) << "equal steps after the resume";
        EXPECT_EQ(p.first_step, steps);
        EXPECT_EQ(p.totals.valid_samples, n - consumed);
        for (std::uint64_t k = 0; k < p.ids.size(); ++k) {
            if (p.valid[k]) ++seen[static_cast<std::size_t>(p.ids[k])];
        }
        if (w1 != w2) continue;
        const EpochPlan& whole = first[static_cast<std::size_t>(r)];
        const auto skip = static_cast<std::ptrdiff_t>(whole.batch_begin(steps));
        EXPECT_TRUE(
            std::equal(p.ids.begin(), p.ids.end(), whole.ids.begin() + skip, whole.ids.end()))
            << "same W: the remaining batches slot for slot";
        EXPECT_EQ(p.steps, whole.steps - steps);
    }
    for (std::uint64_t id = 0; id < n; ++id) {
        EXPECT_EQ(seen[id], 1) << "sample " << id;
        if (seen[id] != 1) break;
    }
}

TEST(BudgetPlan, ResumeSameWorldSlotForSlotOtherWorldExactlyOnce) {
    PlanOptions plan = global_budget(3, 3000, 0);
    for (std::uint64_t window : {0u, 5u}) {
        plan.budget.bucket_window = window;
        for (int w1 : {1, 2, 3, 4}) {
            for (int w2 : {1, 2, 3, 4, 7}) {
                for (std::uint64_t steps : {0u, 1u, 5u}) check_resume(plan, 1000, w1, w2, steps);
            }
        }
    }
    plan.sharding = Sharding::byte_range;
    plan.shuffle = Shuffle::local;
    for (int w : {1, 3, 4}) check_resume(plan, 1000, w, w, 4);
}

/// Global sharding with Shuffle::chunks (C = 10, K = 4) under a byte budget.
PlanOptions chunks_budget(std::uint64_t window) {
    PlanOptions plan = global_budget(5, 3000, window);
    plan.shuffle = Shuffle::chunks;
    plan.chunk_samples = 10;
    plan.window_chunks = 4;
    return plan;
}

TEST(BudgetPlan, ChunksResumeSameWorldSlotForSlotOtherWorldExactlyOnce) {
    for (std::uint64_t window : {0u, 5u}) {
        const PlanOptions plan = chunks_budget(window);
        for (int w1 : {1, 2, 3, 4}) {
            for (int w2 : {1, 2, 3, 4, 7}) {
                for (std::uint64_t steps : {0u, 1u, 5u}) check_resume(plan, 1000, w1, w2, steps);
            }
        }
        // Late in the epoch, where some ranks' parts ran out (padding batches): the resumed
        // plan at the same W is still the rest of the whole one, slot for slot.
        for (int w : {2, 3, 4}) {
            const std::uint64_t steps = plan_of(1000, w, 0, plan, 4).steps;
            for (std::uint64_t back : {1u, 2u, 3u}) {
                if (steps > back) check_resume(plan, 1000, w, w, steps - back);
            }
        }
    }
}

/// Runs `chain` (world size, steps) one after another from the start of epoch 4, each resumed
/// where the one before stopped, the last to the epoch's end: every sample exactly once, equal
/// steps in each run, no step that is padding on every rank, and a run at the world size of
/// the one before continuing its plan slot for slot.
void check_chain(const PlanOptions& plan, std::uint64_t n,
                 const std::vector<std::pair<int, std::uint64_t>>& chain) {
    std::string trace;
    for (const auto& [w, k] : chain) trace += std::to_string(w) + ":" + std::to_string(k) + " ";
    SCOPED_TRACE("N=" + std::to_string(n) + " chain " + trace);
    std::vector<int> seen(n, 0);
    EpochStart start{0, 0, plan.shuffle == Shuffle::chunks ? chain.front().first : 0};
    std::vector<EpochPlan> before;
    std::uint64_t before_stop = 0;
    for (std::size_t i = 0; i < chain.size(); ++i) {
        const int w = chain[i].first;
        std::vector<EpochPlan> plans;
        for (int r = 0; r < w; ++r) plans.push_back(plan_of(n, w, r, plan, 4, start));
        const std::uint64_t steps = plans.front().steps;
        const std::uint64_t stop =
            i + 1 == chain.size() ? steps : std::min<std::uint64_t>(chain[i].second, steps);
        for (std::uint64_t s = 0; s < steps; ++s) {
            bool any = false;
            for (const EpochPlan& p : plans) {
                EXPECT_EQ(p.steps, steps) << "equal steps";
                for (std::uint64_t k = p.batch_begin(s); k < p.batch_begin(s + 1); ++k) {
                    any = any || p.valid[k] != 0;
                }
            }
            EXPECT_TRUE(any) << "run " << i << " step " << s << " is padding on every rank";
        }
        if (i > 0 && chain[i - 1].first == w) {
            for (int r = 0; r < w; ++r) {
                const EpochPlan& whole = before[static_cast<std::size_t>(r)];
                const EpochPlan& rest = plans[static_cast<std::size_t>(r)];
                const auto skip = static_cast<std::ptrdiff_t>(whole.batch_begin(before_stop));
                EXPECT_TRUE(std::equal(rest.ids.begin(), rest.ids.end(), whole.ids.begin() + skip,
                                       whole.ids.end()))
                    << "run " << i << " rank " << r << ": same W, the rest slot for slot";
            }
        }
        for (const EpochPlan& p : plans) {
            for (std::uint64_t k = 0; k < p.batch_begin(stop); ++k) {
                if (p.valid[k]) ++seen[static_cast<std::size_t>(p.ids[k])];
            }
        }
        start = EpochStart{start.step + stop, plans.front().job_samples_before[stop],
                           start.order_world_size};
        before = std::move(plans);
        before_stop = stop;
    }
    for (std::uint64_t id = 0; id < n; ++id) {
        EXPECT_EQ(seen[id], 1) << "sample " << id;
        if (seen[id] != 1) break;
    }
}

TEST(BudgetPlan, ChunksChainsOfResumesBackToTheOrdersWorldSize) {
    // P -> Q -> P -> P: the run back at P starts inside a row of the list (the run at Q was
    // dealt without empty entries); the one after it must continue it slot for slot.
    for (std::uint64_t window : {0u, 5u}) {
        const PlanOptions plan = chunks_budget(window);
        for (std::uint64_t n : {47u, 200u, 1000u}) {
            for (int p : {2, 3, 4}) {
                for (int q : {1, 2, 3, 5}) {
                    if (q == p) continue;
                    for (std::uint64_t a : {1u, 2u}) {
                        for (std::uint64_t b : {1u, 3u}) {
                            for (std::uint64_t c : {0u, 1u, 2u, 4u}) {
                                check_chain(plan, n, {{p, a}, {q, b}, {p, c}, {p, 0}});
                            }
                        }
                    }
                }
            }
        }
    }
}

TEST(BudgetPlan, ChunksRankReadsOnlyItsOwnPartInPositionOrder) {
    const std::uint64_t n = 1500;
    for (std::uint64_t window : {0u, 6u}) {
        const PlanOptions plan = chunks_budget(window);
        for (int w : {1, 2, 3, 4}) {
            const detail::ChunkOrder order =
                detail::chunk_order(n, plan, 2, static_cast<std::uint64_t>(w));
            for (int r = 0; r < w; ++r) {
                // Part r: positions r, r + W, ... of the chunk order, in order.
                std::vector<std::uint64_t> part;
                for (std::uint64_t p = static_cast<std::uint64_t>(r); p < n;
                     p += static_cast<std::uint64_t>(w)) {
                    part.push_back(order.id_at(p));
                }
                std::vector<std::uint64_t> mine;
                for (const auto& b : real_batches(plan_of(n, w, r, plan, 2))) {
                    mine.insert(mine.end(), b.begin(), b.end());
                }
                if (window == 0) {
                    EXPECT_EQ(mine, part) << "W=" << w << " rank " << r;
                } else {  // bucketing reorders inside windows of batches, not across parts
                    std::sort(mine.begin(), mine.end());
                    std::sort(part.begin(), part.end());
                    EXPECT_EQ(mine, part) << "W=" << w << " rank " << r;
                }
            }
        }
    }
}

TEST(BudgetPlan, ResumePositionInsideABatchIsAConfigError) {
    PlanOptions plan;
    plan.sharding = Sharding::global;
    plan.budget.batch_bytes = 3000;
    const EpochPlan p = plan_of(1000, 2, 0, plan, 0);
    ASSERT_GT(p.batch_slots(0), 1u);
    EXPECT_THROW(plan_of(1000, 3, 0, plan, 0, {1, 1}), ConfigError);
    EXPECT_THROW(plan_of(1000, 3, 0, plan, 0, {1, 1001}), ConfigError);
    EXPECT_NO_THROW(plan_of(1000, 3, 0, plan, 0, {1, p.batch_slots(0)}));
}

}  // namespace
