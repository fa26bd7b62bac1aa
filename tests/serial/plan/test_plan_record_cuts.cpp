/// @file
/// Byte-range cuts over fixed and skewed record sizes: per-rank record counts sum to N, and the
/// planner's skew-corrected shards still give equal counts and steps.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/source.hpp"
#include "plan_sweep.hpp"

namespace {

using mpistage::EpochPlan;
using mpistage::PlanOptions;
using mpistage::Remainder;
using namespace mpistage_test_plan;

// ---- record sizes: byte-range cuts (uniform and skewed) ---------------------------------------

TEST(PlanRecordCuts, FixedRecordsInCutSumToNAndStartAtTheCut) {
    const std::vector<std::uint64_t> record_sizes = {1,    3,      8,       784,
                                                     4096, 150000, 2000000, std::uint64_t{1} << 40};
    const std::vector<std::uint64_t> counts = {1,   2,   3,    5,     10,        26,
                                               209, 922, 9909, 60000, 1000000007};
    for (const std::uint64_t rec : record_sizes) {
        for (const std::uint64_t n : counts) {
            for (const int w : kWorldSizes) {
                const auto total = static_cast<unsigned __int128>(n) * rec;
                std::uint64_t first = 0;  // exclusive scan of the per-rank counts
                for (int r = 0; r < w; ++r) {
                    const std::string at = "N=" + std::to_string(n) +
                                           " record_bytes=" + std::to_string(rec) +
                                           " W=" + std::to_string(w) + " rank=" + std::to_string(r);
                    // The rank's cut starts at byte floor(r*T/W); its first record is the first
                    // one that starts at or after that byte.
                    const unsigned __int128 cut =
                        total * static_cast<unsigned>(r) / static_cast<unsigned>(w);
                    ASSERT_GE(static_cast<unsigned __int128>(first) * rec, cut) << at;
                    if (first > 0) {
                        ASSERT_LT(static_cast<unsigned __int128>(first - 1) * rec, cut) << at;
                    }
                    const std::uint64_t count = mpistage::fixed_records_in_cut(n, rec, r, w);
                    // Uniform records: a cut holds N/W records up to one boundary record.
                    const auto wu = static_cast<std::uint64_t>(w);
                    ASSERT_LE(count, n / wu + 2) << at;
                    ASSERT_GE(count + 2, n / wu) << at;
                    first += count;
                }
                ASSERT_EQ(first, n) << "N=" << n << " record_bytes=" << rec << " W=" << w
                                    << ": per-rank counts do not sum to N";
            }
        }
    }
    // Outside the world: no records.
    EXPECT_EQ(mpistage::fixed_records_in_cut(10, 4, -1, 4), 0u);
    EXPECT_EQ(mpistage::fixed_records_in_cut(10, 4, 4, 4), 0u);
    EXPECT_EQ(mpistage::fixed_records_in_cut(0, 4, 0, 4), 0u);
}

TEST(PlanRecordCuts, SkewedRecordSizesStillGiveEqualCountsAfterCorrection) {
    // Records of very different sizes (one huge record, many tiny ones) make the raw byte cuts
    // unbalanced, some ranks with no record at all. The counts still sum to N (so the exscan gives
    // consistent global ids), and the planner's skew-corrected shards give every rank N/W or
    // N/W+1 samples and the same number of steps. The cut here is a reference computation from
    // prefix sums, independent of mpistage's index code.
    const std::vector<std::vector<std::uint64_t>> layouts = {
        {1000000, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 5000000},
        {7, 150000, 3, 3, 2000000, 1, 1, 1, 64, 64, 64, 64, 9, 1 << 20, 2, 2, 2},
    };
    for (const auto& sizes : layouts) {
        std::vector<std::uint64_t> starts(sizes.size());
        std::uint64_t total = 0;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            starts[i] = total;
            total += sizes[i];
        }
        const std::uint64_t n = sizes.size();
        for (const int w : kWorldSizes) {
            const auto wu = static_cast<std::uint64_t>(w);
            std::uint64_t sum = 0;
            int empty_ranks = 0;
            for (std::uint64_t r = 0; r < wu; ++r) {
                const auto lo =
                    static_cast<std::uint64_t>(static_cast<unsigned __int128>(total) * r / wu);
                const auto hi = static_cast<std::uint64_t>(static_cast<unsigned __int128>(total) *
                                                           (r + 1) / wu);
                const auto count =
                    static_cast<std::uint64_t>(std::lower_bound(starts.begin(), starts.end(), hi) -
                                               std::lower_bound(starts.begin(), starts.end(), lo));
                empty_ranks += count == 0;
                sum += count;
            }
            EXPECT_EQ(sum, n) << "W=" << w;
            if (w >= 4) EXPECT_GT(empty_ranks, 0) << "layout is not skewed enough for W=" << w;
            for (const Remainder rem : kRemainders) {
                PlanOptions o;
                o.batch_size = 2;
                o.remainder = rem;
                const auto begins = mpistage::balanced_shard_begins(n, w);
                const auto totals = mpistage::plan_totals(n, w, o);
                for (int r = 0; r < w; ++r) {
                    const EpochPlan p = mpistage::plan_epoch(n, w, r, o, 0);
                    const std::uint64_t size = p.shard_end - p.shard_begin;
                    EXPECT_TRUE(size == n / wu || size == n / wu + 1) << "W=" << w << " r=" << r;
                    EXPECT_EQ(p.shard_begin, begins[static_cast<std::size_t>(r)]);
                    EXPECT_EQ(p.steps, totals.steps);
                }
            }
        }
    }
}

}  // namespace
