/// @file
/// BUGS.md rows S5-S10 ("Sharding, batch counts, shuffling") as planner tests: each test checks
/// what the row says mpistage must do, on the pure planner, simulating every rank serially.

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "plan_bugs.hpp"

namespace {

using mpistage::PlanOptions;
using namespace mpistage_test_plan_bugs;

// S5 (huggingface/datasets#6623): records 1..5, W=2, B=2: 2 batches on both ranks (last one
// masked or padded), or 1 with drop; never a rank without a step.
TEST(PlanBugs, S5_hf_datasets6623_N5_W2_B2) {
    for (const Mode mode : kAllModes) {
        for (const Remainder rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
            const Case c = make_case(5, 2, 2, rem, mode, 5);
            for (std::uint64_t e = 0; e < 3; ++e) {
                const std::string at = describe(c, e);
                const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
                const std::uint64_t steps = rem == Remainder::drop ? 1 : 2;
                expect_equal_steps(wp, steps, 2, at);
                expect_flagged_padding(wp, 5, 2, rem, at);
                if (rem == Remainder::drop) {
                    const auto seen = valid_multiplicity(wp, 5);
                    int total = 0;
                    for (const int s : seen) {
                        EXPECT_LE(s, 1) << at;
                        total += s;
                    }
                    EXPECT_EQ(total, 4) << at;
                } else {
                    expect_exactly_once(wp, 5, at);
                    // The padding sits in the last batch.
                    int padded_last = 0;
                    for (const EpochPlan& p : wp.ranks) {
                        EXPECT_TRUE(p.valid[0] && p.valid[1]) << at << ": first batch padded";
                        padded_last += !p.valid[2] + !p.valid[3];
                    }
                    EXPECT_EQ(padded_last, 3) << at;
                }
                for (const EpochPlan& p : wp.ranks) EXPECT_GE(p.steps, 1u) << at;
            }
        }
    }
}

// S6 (NVIDIA/DALI#3855): N=26, B=6, W=4, padding: no zero-sample batch unless flagged; the same
// counts on all ranks in every epoch.
TEST(PlanBugs, S6_dali3855_N26_B6_W4_no_unflagged_empty_batch) {
    for (const Mode mode : kAllModes) {
        for (const Remainder rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
            const Case c = make_case(26, 4, 6, rem, mode, 3855);
            const std::uint64_t steps = mpistage_test_plan::expected_steps(c);
            for (std::uint64_t e = 0; e < 6; ++e) {
                const std::string at = describe(c, e);
                const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
                expect_equal_steps(wp, steps, 6, at);
                expect_flagged_padding(wp, 26, 6, rem, at);
                if (rem != Remainder::drop) expect_exactly_once(wp, 26, at);
                for (std::size_t r = 0; r < 4; ++r) {
                    const EpochPlan& p = wp.ranks[r];
                    for (std::uint64_t s = 0; s < p.steps; ++s) {
                        int n_valid = 0;
                        int n_flagged = 0;
                        for (std::uint64_t j = 0; j < 6; ++j) {
                            n_valid += p.valid[s * 6 + j] == 1;
                            n_flagged += p.valid[s * 6 + j] == 0;
                        }
                        // Every slot is either a valid sample or flagged padding, so a batch with
                        // no sample is all padding, never an unflagged empty batch.
                        EXPECT_EQ(n_valid + n_flagged, 6) << at << " rank " << r;
                        if (n_valid == 0) {
                            EXPECT_NE(rem, Remainder::drop) << at << " rank " << r;
                            EXPECT_EQ(s, p.steps - 1) << at
                                                      << ": an all-padding batch before "
                                                         "the rank's last batch";
                        }
                    }
                }
            }
        }
    }
}

// S7 (NVIDIA/DALI#2881): ids 0..9, W=4, B=3: the documented assignment; union exactly {0..9}
// every epoch.
TEST(PlanBugs, S7_dali2881_ids0to9_W4_B3_documented_assignment) {
    using Ids = std::vector<std::int64_t>;
    constexpr std::int64_t P = kPaddingId;
    // byte_range: shards of N/W samples plus one for the first N mod W ranks: [0,3) [3,6) [6,8)
    // [8,10), ascending without shuffle.
    {
        PlanOptions o;
        o.batch_size = 3;
        o.remainder = Remainder::mask;
        EXPECT_EQ(mpistage::plan_epoch(10, 4, 0, o, 0).ids, (Ids{0, 1, 2}));
        EXPECT_EQ(mpistage::plan_epoch(10, 4, 1, o, 0).ids, (Ids{3, 4, 5}));
        EXPECT_EQ(mpistage::plan_epoch(10, 4, 2, o, 0).ids, (Ids{6, 7, P}));
        EXPECT_EQ(mpistage::plan_epoch(10, 4, 3, o, 0).ids, (Ids{8, 9, P}));
        o.remainder = Remainder::drop;  // floor(floor(10/4)/3) = 0 steps on every rank
        for (int r = 0; r < 4; ++r) EXPECT_EQ(mpistage::plan_epoch(10, 4, r, o, 0).steps, 0u);
    }
    // global: global batches of W*B = 12 positions, rank r takes positions [3r, 3r+3).
    {
        PlanOptions o;
        o.batch_size = 3;
        o.sharding = Sharding::global;
        o.remainder = Remainder::mask;
        EXPECT_EQ(mpistage::plan_epoch(10, 4, 0, o, 0).ids, (Ids{0, 1, 2}));
        EXPECT_EQ(mpistage::plan_epoch(10, 4, 1, o, 0).ids, (Ids{3, 4, 5}));
        EXPECT_EQ(mpistage::plan_epoch(10, 4, 2, o, 0).ids, (Ids{6, 7, 8}));
        EXPECT_EQ(mpistage::plan_epoch(10, 4, 3, o, 0).ids, (Ids{9, P, P}));
    }
    for (const Mode mode : kAllModes) {
        for (const Remainder rem : {Remainder::pad, Remainder::mask}) {
            const Case c = make_case(10, 4, 3, rem, mode, 2881);
            for (std::uint64_t e = 0; e < 8; ++e) {
                const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
                expect_equal_steps(wp, 1, 3, describe(c, e));
                std::multiset<std::int64_t> u;
                for (const EpochPlan& p : wp.ranks) {
                    for (const auto id : mpistage_test_plan::valid_ids(p)) u.insert(id);
                }
                EXPECT_EQ(u, (std::multiset<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}))
                    << describe(c, e);
            }
        }
    }
}

// S8 (NVIDIA/DALI#3488): N not divisible by B, no padding: the last batch holds only the
// remaining samples, never samples of the next epoch.
TEST(PlanBugs, S8_dali3488_last_batch_never_takes_next_epoch) {
    for (const Mode mode : kAllModes) {
        for (const int w : {1, 3}) {
            const std::uint64_t n = 22;
            const std::uint64_t b = 4;  // 22 mod 4 != 0; per-rank shards 8, 7, 7
            // mask: the last batch holds the remaining samples, the rest flagged empty.
            const Case cm = make_case(n, w, b, Remainder::mask, mode, 3488);
            // drop: the tail is dropped, the last batch is full of this epoch's samples.
            const Case cd = make_case(n, w, b, Remainder::drop, mode, 3488);
            for (std::uint64_t e = 0; e < 4; ++e) {
                const WorldPlan wm = mpistage_test_plan::plan_world(cm, e);
                expect_exactly_once(wm, n, describe(cm, e));
                for (std::size_t r = 0; r < wm.ranks.size(); ++r) {
                    const EpochPlan& p = wm.ranks[r];
                    ASSERT_GE(p.steps, 1u);
                    // The last batch's valid ids are exactly the samples of this epoch that the
                    // earlier batches did not yield.
                    std::set<std::int64_t> before;
                    for (std::size_t k = 0; k < (p.steps - 1) * b; ++k) {
                        if (p.valid[k]) before.insert(p.ids[k]);
                    }
                    std::set<std::int64_t> last;
                    for (std::size_t k = (p.steps - 1) * b; k < p.ids.size(); ++k) {
                        if (p.valid[k]) {
                            last.insert(p.ids[k]);
                        } else {
                            EXPECT_EQ(p.ids[k], kPaddingId) << describe(cm, e);
                        }
                    }
                    std::set<std::int64_t> own;
                    for (const auto id : mpistage_test_plan::valid_ids(p)) own.insert(id);
                    EXPECT_EQ(own.size(), before.size() + last.size()) << describe(cm, e);
                    for (const auto id : last) {
                        EXPECT_EQ(before.count(id), 0u) << describe(cm, e);
                    }
                }
                const WorldPlan wd = mpistage_test_plan::plan_world(cd, e);
                expect_flagged_padding(wd, n, b, Remainder::drop, describe(cd, e));
                const auto seen = valid_multiplicity(wd, n);
                for (const int s : seen) EXPECT_LE(s, 1) << describe(cd, e);
                // The kept samples of epoch e are this epoch's own: each rank's full batches
                // hold floor(n_r/B)*B (byte_range) or the first S*W*B positions (global) of
                // the epoch order, and the same count every epoch; nothing is borrowed.
                EXPECT_EQ(wd.totals.steps, mpistage_test_plan::expected_steps(cd));
            }
        }
    }
}

// S9 (vahidk/tfrecord#78): 2,000 records with 2 or 8 I/O threads: 2,000 yielded whatever the
// thread count. The planner has no threads: it decides the per-rank read lists that the I/O
// threads execute, so here 2,000 samples are planned exactly once for several W and B. That the
// pipeline yields the plan whatever its thread count is tested in the pipeline/loader tests.
TEST(PlanBugs, S9_tfrecord78_2000_records_planned_exactly_once) {
    for (const Mode mode : kAllModes) {
        for (const int w : {1, 2, 3, 8}) {
            for (const std::uint64_t b : {1u, 7u, 32u}) {
                const Case c = make_case(2000, w, b, Remainder::mask, mode, 78);
                const WorldPlan wp = mpistage_test_plan::plan_world(c, 1);
                expect_exactly_once(wp, 2000, describe(c));
                std::uint64_t valid = 0;
                for (const EpochPlan& p : wp.ranks)
                    valid += mpistage_test_plan::valid_ids(p).size();
                EXPECT_EQ(valid, 2000u) << describe(c);
            }
        }
    }
}

// S10 (Lightning-AI/litData#233, webdataset#188): fewer files than ranks (1 file, W=2) and 100
// items on W=4: equal batch counts; a rank with no file still gets its share. The planner sees
// samples, not files: byte_range shards cut the concatenated byte space of all files, so one file
// is split between ranks. File-level handling (opening, per-file sharding of gzip TFRecords) is
// tested in the source and MPI tests.
TEST(PlanBugs, S10_litdata233_webdataset188_fewer_files_than_ranks) {
    // 100 items, W=4: 25 each, equal batch counts for every B and policy.
    for (const Mode mode : kAllModes) {
        for (const Remainder rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
            for (const std::uint64_t b : {1u, 3u, 8u, 25u, 64u}) {
                const Case c = make_case(100, 4, b, rem, mode, 233);
                const WorldPlan wp = mpistage_test_plan::plan_world(c, 0);
                expect_equal_steps(wp, mpistage_test_plan::expected_steps(c), b, describe(c));
                expect_flagged_padding(wp, 100, b, rem, describe(c));
                if (rem != Remainder::drop) expect_exactly_once(wp, 100, describe(c));
                if (mode.sharding == Sharding::byte_range) {
                    for (const EpochPlan& p : wp.ranks) {
                        EXPECT_EQ(p.shard_end - p.shard_begin, 25u) << describe(c);
                    }
                }
            }
        }
    }
    // One file of 10 records, W=2: the byte-range cut splits the file, both ranks get records.
    EXPECT_EQ(mpistage::fixed_records_in_cut(10, 4096, 0, 2), 5u);
    EXPECT_EQ(mpistage::fixed_records_in_cut(10, 4096, 1, 2), 5u);
    // Small N: every rank still gets its share and the same number of steps (at least one):
    // byte_range N/W or N/W+1 samples; global the positions < N of its slice of each step.
    for (const std::uint64_t n : {1u, 2u, 3u, 5u}) {
        for (const int w : {2, 4}) {
            for (const Mode mode : kAllModes) {
                const Case c = make_case(n, w, 2, Remainder::mask, mode, 188);
                const WorldPlan wp = mpistage_test_plan::plan_world(c, 0);
                const std::uint64_t steps = mpistage_test_plan::expected_steps(c);
                EXPECT_GE(steps, 1u) << describe(c);
                expect_equal_steps(wp, steps, 2, describe(c));
                expect_exactly_once(wp, n, describe(c));
                const auto wu = static_cast<std::uint64_t>(w);
                for (std::uint64_t r = 0; r < wu; ++r) {
                    const auto got = mpistage_test_plan::valid_ids(wp.ranks[r]).size();
                    std::uint64_t share = 0;
                    if (mode.sharding == Sharding::byte_range) {
                        share = n / wu + (r < n % wu ? 1 : 0);
                    } else {
                        for (std::uint64_t s = 0; s < steps; ++s) {
                            for (std::uint64_t j = 0; j < 2; ++j)
                                share += s * wu * 2 + r * 2 + j < n;
                        }
                    }
                    EXPECT_EQ(got, share) << describe(c) << " rank " << r;
                }
            }
        }
    }
}

}  // namespace
