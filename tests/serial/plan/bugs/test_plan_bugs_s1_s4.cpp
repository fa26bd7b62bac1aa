/// @file
/// BUGS.md rows S1-S4 ("Sharding, batch counts, shuffling") as planner tests: each test checks
/// what the row says mpistage must do, on the pure planner, simulating every rank serially.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "plan_bugs.hpp"

namespace {

using mpistage::ConfigError;
using mpistage::PlanOptions;
using namespace mpistage_test_plan_bugs;

// S1 (pytorch#25162): N=10, W=3, no shuffle, padding: every sample once with valid=true, padded
// slots valid=false under mask, 4 slots a rank.
TEST(PlanBugs, S1_pytorch25162_N10_W3_mask) {
    for (const Sharding sharding : {Sharding::byte_range, Sharding::global}) {
        for (const Remainder rem : {Remainder::mask, Remainder::pad}) {
            for (const std::uint64_t b : {1u, 2u, 4u}) {
                const Case c = make_case(10, 3, b, rem, {sharding, Shuffle::none});
                const std::string at = describe(c);
                const WorldPlan wp = mpistage_test_plan::plan_world(c, 0);
                for (std::size_t r = 0; r < 3; ++r) {
                    EXPECT_EQ(wp.ranks[r].ids.size(), 4u) << at << ": 4 slots a rank";
                }
                expect_exactly_once(wp, 10, at);
                expect_flagged_padding(wp, 10, b, rem, at);
                EXPECT_EQ(wp.totals.padding_slots, 2u) << at;
                EXPECT_EQ(wp.totals.valid_samples, 10u) << at;
            }
        }
    }
    // The exact layout with byte_range, B=4, mask: shards [0,4), [4,7), [7,10).
    PlanOptions o;
    o.batch_size = 4;
    o.remainder = Remainder::mask;
    const EpochPlan r0 = mpistage::plan_epoch(10, 3, 0, o, 0);
    const EpochPlan r1 = mpistage::plan_epoch(10, 3, 1, o, 0);
    const EpochPlan r2 = mpistage::plan_epoch(10, 3, 2, o, 0);
    EXPECT_EQ(r0.ids, (std::vector<std::int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(r1.ids, (std::vector<std::int64_t>{4, 5, 6, kPaddingId}));
    EXPECT_EQ(r2.ids, (std::vector<std::int64_t>{7, 8, 9, kPaddingId}));
    EXPECT_EQ(r0.valid, (std::vector<std::uint8_t>{1, 1, 1, 1}));
    EXPECT_EQ(r1.valid, (std::vector<std::uint8_t>{1, 1, 1, 0}));
    EXPECT_EQ(r2.valid, (std::vector<std::uint8_t>{1, 1, 1, 0}));
}

// S2 (pytorch#45324, #49172): N=4, W=9 and N=3, W=7: no crash, every rank has 1 batch; W <= 0 or
// N = 0 is a clear ConfigError.
TEST(PlanBugs, S2_pytorch45324_49172_fewer_samples_than_ranks) {
    struct Input {
        std::uint64_t n;
        int w;
    };
    for (const Input in : {Input{4, 9}, Input{3, 7}}) {
        for (const Mode mode : kAllModes) {
            for (const Remainder rem : {Remainder::pad, Remainder::mask}) {
                for (const std::uint64_t b : {1u, 2u, 32u}) {
                    const Case c = make_case(in.n, in.w, b, rem, mode, 3);
                    const std::string at = describe(c);
                    WorldPlan wp;
                    ASSERT_NO_THROW(wp = mpistage_test_plan::plan_world(c, 1)) << at;
                    expect_equal_steps(wp, 1, b, at);
                    expect_exactly_once(wp, in.n, at);
                    expect_flagged_padding(wp, in.n, b, rem, at);
                }
            }
            // drop: nothing fills a full batch on every rank, so every rank agrees on 0 steps
            // (no rank waits in a collective for another).
            const Case c = make_case(in.n, in.w, 1, Remainder::drop, mode);
            const WorldPlan wp = mpistage_test_plan::plan_world(c, 0);
            expect_equal_steps(wp, 0, 1, describe(c));
        }
    }
    PlanOptions o;
    for (const int w : {0, -1, -9}) {
        EXPECT_THROW((void)mpistage::plan_epoch(4, w, 0, o, 0), ConfigError) << "W=" << w;
        EXPECT_THROW((void)mpistage::plan_totals(4, w, o), ConfigError) << "W=" << w;
    }
    EXPECT_THROW((void)mpistage::plan_epoch(0, 9, 0, o, 0), ConfigError);
    EXPECT_THROW((void)mpistage::plan_totals(0, 9, o), ConfigError);
    try {
        (void)mpistage::plan_epoch(0, 9, 0, o, 0);
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("no samples"), std::string::npos) << e.what();
    }
}

// S3 (pytorch#31771): N=22, B=5, 3 epochs, epoch never advanced by hand: a different order per
// epoch (the epoch is an argument of the API), each epoch exactly once.
TEST(PlanBugs, S3_pytorch31771_order_changes_per_epoch) {
    for (const Mode mode : kShuffledModes) {
        for (const int w : {1, 2}) {
            const Case c = make_case(22, w, 5, Remainder::mask, mode, 1234);
            std::vector<WorldPlan> epochs;
            for (std::uint64_t e = 0; e < 3; ++e) {
                epochs.push_back(mpistage_test_plan::plan_world(c, e));
                expect_exactly_once(epochs.back(), 22, describe(c, e));
            }
            for (std::size_t r = 0; r < static_cast<std::size_t>(w); ++r) {
                for (std::size_t e1 = 0; e1 < 3; ++e1) {
                    for (std::size_t e2 = e1 + 1; e2 < 3; ++e2) {
                        EXPECT_NE(epochs[e1].ranks[r].ids, epochs[e2].ranks[r].ids)
                            << describe(c) << " rank " << r << ": epochs " << e1 << " and " << e2;
                    }
                }
            }
            // No hidden state: asking for epoch 0 again gives epoch 0's order.
            const WorldPlan again = mpistage_test_plan::plan_world(c, 0);
            for (std::size_t r = 0; r < static_cast<std::size_t>(w); ++r) {
                EXPECT_TRUE(mpistage_test_plan::same_plan(again.ranks[r], epochs[0].ranks[r]));
            }
        }
    }
}

// S4 (pytorch#33148): W=2 with rank shards of 3 and 2 batches: equal batch counts, decided before
// the epoch starts.
TEST(PlanBugs, S4_pytorch33148_uneven_shards_equal_batch_counts) {
    // N=17, W=2, B=4: shards of 9 and 8 samples, i.e. 3 and 2 batches if each rank batched alone.
    const auto begins = mpistage::balanced_shard_begins(17, 2);
    ASSERT_EQ(mpistage_test_plan::ceil_div(begins[1] - begins[0], 4), 3u);
    ASSERT_EQ(mpistage_test_plan::ceil_div(begins[2] - begins[1], 4), 2u);
    for (const Mode mode : kAllModes) {
        for (const Remainder rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
            const Case c = make_case(17, 2, 4, rem, mode, 9);
            // "Decided before the epoch starts": the count is a pure function of (N, W, options),
            // available from plan_totals without building any rank's plan.
            const auto totals = mpistage::plan_totals(17, 2, mpistage_test_plan::options_of(c));
            EXPECT_EQ(totals.steps, mpistage_test_plan::expected_steps(c)) << describe(c);
            for (std::uint64_t e = 0; e < 3; ++e) {
                const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
                expect_equal_steps(wp, totals.steps, 4, describe(c, e));
                expect_flagged_padding(wp, 17, 4, rem, describe(c, e));
                if (rem != Remainder::drop) expect_exactly_once(wp, 17, describe(c, e));
            }
        }
    }
    PlanOptions o;
    o.batch_size = 4;
    o.remainder = Remainder::mask;
    EXPECT_EQ(mpistage::plan_totals(17, 2, o).steps, 3u);
    o.remainder = Remainder::drop;
    EXPECT_EQ(mpistage::plan_totals(17, 2, o).steps, 2u);
}

}  // namespace
