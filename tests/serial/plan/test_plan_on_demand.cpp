/// @file
/// `plan_epoch_on_demand`: the loader's plans of fixed batches store no slot (O(W) memory, flat
/// in N) and give the same slots as `plan_epoch`; plans that need every slot (budget batches,
/// byte-balanced steps) are stored as before.

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "mpistage/plan.hpp"

namespace {

using namespace mpistage;

PlanOptions fixed(std::uint64_t b, Sharding sharding, Shuffle shuffle, Remainder remainder) {
    PlanOptions o;
    o.batch_size = b;
    o.sharding = sharding;
    o.shuffle = shuffle;
    o.remainder = remainder;
    o.seed = 11;
    return o;
}

// 10^12 samples: a stored plan would need 9 TB per rank; the on-demand plan holds no slot and
// its slots follow from arithmetic (byte_range without shuffle: the shard from N/2 on rank 1 of
// 2; global without shuffle: position s·W·B + r·B + j).
TEST(PlanOnDemand, TrillionSamplesStoreNothing) {
    const std::uint64_t n = 1000000000000ull;
    const auto br = plan_epoch_on_demand(n, 2, 1, fixed(1000, Sharding::byte_range, Shuffle::none,
                                                        Remainder::drop),
                                         0, EpochStart{});
    EXPECT_TRUE(br.on_demand());
    EXPECT_TRUE(br.ids.empty());
    EXPECT_TRUE(br.valid.empty());
    EXPECT_EQ(br.steps, n / 2 / 1000);
    EXPECT_EQ(br.slot_id(0), static_cast<std::int64_t>(n / 2));
    EXPECT_EQ(br.slot_id(br.steps * 1000 - 1), static_cast<std::int64_t>(n - 1));
    EXPECT_TRUE(br.slot_valid(br.steps * 1000 - 1));

    const auto gl = plan_epoch_on_demand(n, 4, 3, fixed(8, Sharding::global, Shuffle::none,
                                                        Remainder::mask),
                                         0, EpochStart{});
    EXPECT_TRUE(gl.on_demand());
    EXPECT_TRUE(gl.ids.empty());
    EXPECT_EQ(gl.slot_id(0), 24);                           // step 0: 0·32 + 3·8 + 0
    EXPECT_EQ(gl.slot_id(5 * 8 + 7), 5 * 32 + 3 * 8 + 7);  // step 5, slot 7

    // Shuffled: the permutation is evaluated per slot; ids stay inside the rank's shard.
    const auto sh = plan_epoch_on_demand(n, 2, 0, fixed(64, Sharding::byte_range, Shuffle::local,
                                                        Remainder::pad),
                                         3, EpochStart{});
    EXPECT_TRUE(sh.ids.empty());
    std::set<std::int64_t> seen;
    for (std::uint64_t k = 0; k < 1000; ++k) {
        const std::int64_t id = sh.slot_id(k * 499);
        EXPECT_GE(id, 0);
        EXPECT_LT(id, static_cast<std::int64_t>(n / 2));
        seen.insert(id);
    }
    EXPECT_EQ(seen.size(), 1000u);  // a bijection: distinct slots, distinct ids
}

// Every slot of the on-demand plan equals the stored plan's (`plan_epoch`), for both
// shardings, every shuffle that fits, every remainder, fresh and resumed epochs.
TEST(PlanOnDemand, SameSlotsAsStoredPlan) {
    std::uint64_t compared = 0;
    for (const std::uint64_t n : {1ull, 7ull, 100ull, 1001ull}) {
        for (const int w : {1, 3, 4}) {
            for (const std::uint64_t b : {1ull, 5ull, 32ull}) {
                for (const auto rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
                    for (const auto& [sharding, shuffle] :
                         {std::pair{Sharding::byte_range, Shuffle::none},
                          std::pair{Sharding::byte_range, Shuffle::local},
                          std::pair{Sharding::global, Shuffle::none},
                          std::pair{Sharding::global, Shuffle::global}}) {
                        const PlanOptions o = fixed(b, sharding, shuffle, rem);
                        const EpochTotals t = plan_totals(n, w, o);
                        const EpochStart start =
                            sharding == Sharding::global
                                ? EpochStart{0, n / 3}
                                : EpochStart{t.steps / 2, 0};
                        for (int r = 0; r < w; ++r) {
                            const EpochPlan stored = plan_epoch(n, w, r, o, 2, start);
                            const EpochPlan lazy = plan_epoch_on_demand(n, w, r, o, 2, start);
                            ASSERT_FALSE(stored.on_demand());
                            ASSERT_TRUE(lazy.on_demand());
                            ASSERT_EQ(lazy.steps, stored.steps);
                            ASSERT_EQ(stored.ids.size(), stored.steps * b);
                            for (std::uint64_t k = 0; k < stored.ids.size(); ++k) {
                                ASSERT_EQ(lazy.slot_id(k), stored.ids[k])
                                    << "N=" << n << " W=" << w << " B=" << b << " rank " << r
                                    << " slot " << k;
                                ASSERT_EQ(lazy.slot_valid(k), stored.valid[k] != 0);
                                ASSERT_EQ(stored.slot_id(k), stored.ids[k]);
                                ++compared;
                            }
                        }
                    }
                }
            }
        }
    }
    EXPECT_GT(compared, 10000u);
}

// Budget batches and byte-balanced steps need every slot: they are stored, as by plan_epoch.
TEST(PlanOnDemand, BudgetAndBalancedPlansAreStored) {
    const SampleBytesFn bytes = [](std::uint64_t id) { return 1 + id % 17; };
    PlanOptions budget = fixed(4, Sharding::byte_range, Shuffle::none, Remainder::drop);
    budget.budget.batch_bytes = 40;
    const auto a = plan_epoch_on_demand(200, 2, 0, budget, 0, EpochStart{}, bytes);
    EXPECT_FALSE(a.on_demand());
    EXPECT_TRUE(a.budgeted());
    EXPECT_EQ(a.ids.size(), a.batch_begin(a.steps));

    PlanOptions balanced = fixed(4, Sharding::global, Shuffle::global, Remainder::pad);
    balanced.balance_steps = true;
    const auto b = plan_epoch_on_demand(200, 3, 1, balanced, 0, EpochStart{}, bytes);
    EXPECT_FALSE(b.on_demand());
    EXPECT_EQ(b.ids.size(), b.steps * 4);
    const auto stored = plan_epoch(200, 3, 1, balanced, 0, EpochStart{}, bytes);
    EXPECT_EQ(b.ids, stored.ids);
}

}  // namespace
