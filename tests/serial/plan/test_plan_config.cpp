/// @file
/// Planner configuration: bad world sizes, ranks and options are ConfigErrors, option names
/// round-trip, and balanced shards give every rank N/W or N/W+1 samples.

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "plan_sweep.hpp"

namespace {

using mpistage::ConfigError;
using mpistage::PlanOptions;
using mpistage::Remainder;
using mpistage::Sharding;
using mpistage::Shuffle;
using namespace mpistage_test_plan;

// ---- configuration errors ---------------------------------------------------------------------

TEST(PlanConfig, BadWorldSizeRankOrOptionsThrowConfigError) {
    for (const Mode m : kModes) {
        for (const Remainder rem : kRemainders) {
            PlanOptions o;
            o.batch_size = 3;
            o.sharding = m.sharding;
            o.shuffle = m.shuffle;
            o.remainder = rem;
            for (const int w : {0, -1, -64, std::numeric_limits<int>::min()}) {
                EXPECT_THROW((void)mpistage::plan_totals(10, w, o), ConfigError) << "W=" << w;
                EXPECT_THROW((void)mpistage::plan_epoch(10, w, 0, o, 0), ConfigError) << "W=" << w;
                EXPECT_THROW((void)mpistage::balanced_shard_begins(10, w), ConfigError)
                    << "W=" << w;
            }
            for (const int w : {1, 4, 64}) {
                EXPECT_THROW((void)mpistage::plan_totals(0, w, o), ConfigError);
                EXPECT_THROW((void)mpistage::plan_epoch(0, w, 0, o, 0), ConfigError);
                EXPECT_THROW((void)mpistage::plan_epoch(10, w, -1, o, 0), ConfigError);
                EXPECT_THROW((void)mpistage::plan_epoch(10, w, w, o, 0), ConfigError);
            }
            PlanOptions zero_b = o;
            zero_b.batch_size = 0;
            EXPECT_THROW(zero_b.validate(), ConfigError);
            EXPECT_THROW((void)mpistage::plan_totals(10, 2, zero_b), ConfigError);
            EXPECT_THROW((void)mpistage::plan_epoch(10, 2, 0, zero_b, 0), ConfigError);
            EXPECT_NO_THROW(o.validate());
        }
    }
    PlanOptions shuffled;
    shuffled.shuffle_globally();  // the one switch: global sharding and global shuffle
    EXPECT_EQ(shuffled.sharding, Sharding::global);
    EXPECT_EQ(shuffled.shuffle, Shuffle::global);
    EXPECT_NO_THROW(shuffled.validate());
    PlanOptions mismatch;
    mismatch.sharding = Sharding::byte_range;
    mismatch.shuffle = Shuffle::global;
    EXPECT_THROW(mismatch.validate(), ConfigError);
    EXPECT_THROW((void)mpistage::plan_epoch(10, 2, 0, mismatch, 0), ConfigError);
    mismatch.sharding = Sharding::global;
    mismatch.shuffle = Shuffle::local;
    EXPECT_THROW(mismatch.validate(), ConfigError);
    EXPECT_THROW((void)mpistage::plan_epoch(10, 2, 0, mismatch, 0), ConfigError);
}

TEST(PlanConfig, OptionNamesRoundTrip) {
    for (const Sharding s : {Sharding::byte_range, Sharding::global}) {
        EXPECT_EQ(mpistage::parse_sharding(mpistage::to_string(s)), s);
    }
    for (const Shuffle s : {Shuffle::none, Shuffle::local, Shuffle::global}) {
        EXPECT_EQ(mpistage::parse_shuffle(mpistage::to_string(s)), s);
    }
    for (const Remainder r : kRemainders) {
        EXPECT_EQ(mpistage::parse_remainder(mpistage::to_string(r)), r);
    }
    EXPECT_THROW(mpistage::parse_sharding("blocks"), ConfigError);
    EXPECT_THROW(mpistage::parse_shuffle("random"), ConfigError);
    EXPECT_THROW(mpistage::parse_remainder("wrap"), ConfigError);
}

// ---- balanced shards --------------------------------------------------------------------------

TEST(PlanShards, BalancedShardBeginsGiveNOverWOrOneMore) {
    for (const std::uint64_t n : {0u, 1u, 2u, 3u, 5u, 10u, 26u, 209u, 922u, 9909u}) {
        for (const int w : kWorldSizes) {
            const auto begins = mpistage::balanced_shard_begins(n, w);
            const auto wu = static_cast<std::uint64_t>(w);
            ASSERT_EQ(begins.size(), wu + 1);
            EXPECT_EQ(begins.front(), 0u);
            EXPECT_EQ(begins.back(), n);
            for (std::uint64_t r = 0; r < wu; ++r) {
                const std::uint64_t size = begins[r + 1] - begins[r];
                ASSERT_LE(begins[r], begins[r + 1]);
                // N/W samples, plus one for the first N mod W ranks.
                EXPECT_EQ(size, n / wu + (r < n % wu ? 1 : 0))
                    << "N=" << n << " W=" << w << " r=" << r;
            }
        }
    }
}

}  // namespace
