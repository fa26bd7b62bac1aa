/// @file
/// Per-step byte balance (`balance_steps`): inside each global batch the samples are assigned
/// to ranks by size; counts per rank stay B, the global batch's content is unchanged, and the
/// worst per-step max/mean byte ratio does not get worse. Sizes are heavy-tailed.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"

namespace {

using mpistage::EpochPlan;
using mpistage::PlanOptions;

// Pareto-like sizes: most samples small, a few 100x larger.
std::uint64_t heavy_tailed(std::uint64_t id) {
    const std::uint64_t u = mpistage::mix64(id * 0x9e37u + 1) % 1000;
    return u < 900 ? 100 + u : (u < 990 ? 2000 + 10 * u : 60000 + 100 * u);
}

PlanOptions options(bool balance, mpistage::Remainder rem) {
    PlanOptions o;
    o.batch_size = 8;
    o.seed = 3;
    o.sharding = mpistage::Sharding::global;
    o.shuffle = mpistage::Shuffle::global;
    o.remainder = rem;
    o.balance_steps = balance;
    return o;
}

TEST(PlanBalance, SameGlobalBatchesEqualCountsAndNoWorseRatio) {
    for (const auto rem : {mpistage::Remainder::drop, mpistage::Remainder::pad,
                           mpistage::Remainder::mask}) {
        for (const int w : {1, 2, 3, 4, 7}) {
            const std::uint64_t n = 1001;
            std::vector<EpochPlan> plain;
            std::vector<EpochPlan> balanced;
            for (int r = 0; r < w; ++r) {
                plain.push_back(mpistage::plan_epoch(n, w, r, options(false, rem), 1, {}, heavy_tailed));
                balanced.push_back(mpistage::plan_epoch(n, w, r, options(true, rem), 1, {}, heavy_tailed));
            }
            const std::uint64_t b = 8;
            for (std::uint64_t s = 0; s < plain[0].steps; ++s) {
                std::vector<std::int64_t> a;
                std::vector<std::int64_t> c;
                std::vector<std::uint64_t> rank_bytes;
                for (int r = 0; r < w; ++r) {
                    ASSERT_EQ(balanced[r].steps, plain[0].steps);
                    ASSERT_EQ(balanced[r].ids.size(), plain[r].ids.size());
                    std::uint64_t bytes = 0;
                    for (std::uint64_t j = 0; j < b; ++j) {
                        const auto k = s * b + j;
                        if (plain[r].valid[k]) a.push_back(plain[r].ids[k]);
                        if (balanced[r].valid[k]) c.push_back(balanced[r].ids[k]);
                        if (balanced[r].ids[k] >= 0) bytes += heavy_tailed(balanced[r].ids[k]);
                    }
                    rank_bytes.push_back(bytes);
                }
                std::sort(a.begin(), a.end());
                std::sort(c.begin(), c.end());
                ASSERT_EQ(a, c) << "W=" << w << " step " << s << ": global batch content changed";
            }
            // Every rank computes the same report.
            for (int r = 1; r < w; ++r) {
                EXPECT_EQ(balanced[r].worst_step_byte_ratio, balanced[0].worst_step_byte_ratio);
            }
            EXPECT_GE(balanced[0].worst_step_byte_ratio, 1.0);
            EXPECT_LE(balanced[0].worst_step_byte_ratio, plain[0].worst_step_byte_ratio + 1e-12)
                << "W=" << w;
            EXPECT_LE(balanced[0].mean_step_byte_ratio, plain[0].mean_step_byte_ratio + 1e-12);
            if (w > 1) EXPECT_LT(balanced[0].mean_step_byte_ratio, plain[0].mean_step_byte_ratio);
        }
    }
}

TEST(PlanBalance, ResumeAtAnotherWorldSizeStaysExactlyOnce) {
    const std::uint64_t n = 500;
    const PlanOptions o = options(true, mpistage::Remainder::mask);
    std::vector<std::int64_t> all;
    const std::uint64_t k = 5;
    for (int r = 0; r < 4; ++r) {
        const EpochPlan p = mpistage::plan_epoch(n, 4, r, o, 0, {}, heavy_tailed);
        for (std::uint64_t i = 0; i < k * 8; ++i) {
            if (p.valid[i]) all.push_back(p.ids[i]);
        }
    }
    const std::uint64_t position = all.size();
    ASSERT_EQ(position, k * 4 * 8);
    for (int r = 0; r < 3; ++r) {
        const EpochPlan p = mpistage::plan_epoch(n, 3, r, o, 0, {k, position}, heavy_tailed);
        for (std::size_t i = 0; i < p.ids.size(); ++i) {
            if (p.valid[i]) all.push_back(p.ids[i]);
        }
    }
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> expected(n);
    for (std::uint64_t i = 0; i < n; ++i) expected[i] = static_cast<std::int64_t>(i);
    EXPECT_EQ(all, expected);
}

TEST(PlanBalance, NeedsGlobalShardingAndSizes) {
    PlanOptions o = options(true, mpistage::Remainder::drop);
    EXPECT_THROW((void)mpistage::plan_epoch(10, 2, 0, o, 0), mpistage::ConfigError);
    o.sharding = mpistage::Sharding::byte_range;
    o.shuffle = mpistage::Shuffle::none;
    EXPECT_THROW(o.validate(), mpistage::ConfigError);
}

}  // namespace
