/// @file
/// Shuffle::chunks (src/plan/chunk_order.hpp): the order is a bijection of [0, N) for every
/// (N, world size, chunk, window) swept; with a world of the order's size each rank's batch
/// draws from at most K + 1 chunks and each rank reads only its own part; chunks move between
/// ranks from epoch to epoch; a resume at another world size is exactly once; whole steps agree
/// with the ranks' plans. The exactly-once, equal-steps and padding properties at every
/// (N, W, B, remainder) are in the sweep (plan_sweep.hpp, mode global_chunks).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "plan/chunk_order.hpp"

namespace {

using mpistage::EpochPlan;
using mpistage::EpochStart;
using mpistage::PlanOptions;
using mpistage::Remainder;
using mpistage::Sharding;
using mpistage::Shuffle;

PlanOptions chunked(std::uint64_t b, std::uint64_t c, std::uint64_t k,
                    Remainder rem = Remainder::drop) {
    PlanOptions o;
    o.batch_size = b;
    o.seed = 5;
    o.sharding = Sharding::global;
    o.shuffle = Shuffle::chunks;
    o.remainder = rem;
    o.chunk_samples = c;
    o.window_chunks = k;
    return o;
}

TEST(PlanChunks, TheOrderIsABijectionOfEveryEpoch) {
    for (const std::uint64_t n : {1u, 2u, 7u, 100u, 101u, 1000u, 1237u}) {
        for (const std::uint64_t pieces : {1u, 2u, 3u, 4u, 7u}) {
            for (const std::uint64_t c : {1u, 3u, 50u, 2000u}) {
                for (const std::uint64_t k : {1u, 2u, 5u}) {
                    for (std::uint64_t e = 0; e < 2; ++e) {
                        const auto order =
                            mpistage::detail::chunk_order(n, chunked(1, c, k), e, pieces);
                        std::vector<char> seen(n, 0);
                        for (std::uint64_t p = 0; p < n; ++p) {
                            const std::uint64_t id = order.id_at(p);
                            ASSERT_LT(id, n) << "N=" << n << " pieces=" << pieces << " C=" << c
                                             << " K=" << k << " p=" << p;
                            ASSERT_FALSE(seen[id]) << "N=" << n << " pieces=" << pieces
                                                   << " C=" << c << " K=" << k << " id " << id;
                            seen[id] = 1;
                        }
                    }
                }
            }
        }
    }
}

// Chunks of one sample in windows of one chunk, one part: position p is chunk p's place in the
// chunk permutation, the Feistel permutation itself, whether tabulated (up to kChunkTable full
// chunks) or computed per id (above it).
TEST(PlanChunks, TheTabulatedChunkPermutationIsTheFeistelPermutation) {
    constexpr std::uint64_t kTable = mpistage::detail::ChunkOrder::kChunkTable;
    for (const std::uint64_t n : {std::uint64_t{2}, std::uint64_t{4285}, kTable, kTable + 1}) {
        const std::uint64_t key = 0x5eed + n;
        const mpistage::detail::ChunkOrder order(n, 1, 1, 1, key);
        const mpistage::Permutation feistel(n, key);
        for (std::uint64_t p = 0; p < n; ++p) {
            ASSERT_EQ(order.id_at(p), feistel(p)) << "N=" << n << " p=" << p;
        }
    }
}

TEST(PlanChunks, EachRankDrawsItsBatchesFromFewChunksOfItsOwnPart) {
    const std::uint64_t n = 10007, b = 40, c = 50, k = 4;  // a global shuffle: ~35 chunks
    for (const int w : {1, 2, 3, 4}) {
        const PlanOptions o = chunked(b, c, k);
        std::vector<std::set<std::uint64_t>> chunks_of_rank(static_cast<std::size_t>(w));
        for (int r = 0; r < w; ++r) {
            const EpochPlan p = mpistage::plan_epoch(n, w, r, o, 0);
            for (std::uint64_t s = 0; s < p.steps; ++s) {
                std::set<std::uint64_t> in_batch;
                for (std::uint64_t j = 0; j < b; ++j) {
                    const auto id = static_cast<std::uint64_t>(p.ids[s * b + j]);
                    in_batch.insert(id / c);
                    chunks_of_rank[static_cast<std::size_t>(r)].insert(id / c);
                }
                // A batch lies in one window or straddles two: at most K + 1 chunks, plus the
                // two chunks a part boundary may cut.
                EXPECT_LE(in_batch.size(), k + 3) << "W=" << w << " rank " << r << " step " << s;
            }
            // The rank's part: N/W samples, at most ceil(N/W/C) + 2 chunks (cut at both ends).
            EXPECT_LE(chunks_of_rank[static_cast<std::size_t>(r)].size(), n / w / c + 3)
                << "W=" << w << " rank " << r;
        }
    }
}

TEST(PlanChunks, ChunksMoveBetweenRanksFromEpochToEpoch) {
    const std::uint64_t n = 4000, b = 10, c = 40;
    const int w = 4;
    const PlanOptions o = chunked(b, c, 2);
    auto first_chunk = [&](std::uint64_t e) {
        return static_cast<std::uint64_t>(mpistage::plan_epoch(n, w, 0, o, e).ids[0]) / c;
    };
    std::set<std::uint64_t> firsts;
    for (std::uint64_t e = 0; e < 8; ++e) firsts.insert(first_chunk(e));
    EXPECT_GE(firsts.size(), 6u) << "rank 0 starts from the same few chunks every epoch";
    EXPECT_EQ(mpistage::plan_epoch(n, w, 1, o, 3).ids, mpistage::plan_epoch(n, w, 1, o, 3).ids);
}

TEST(PlanChunks, AResumeAtAnotherWorldSizeServesTheRestExactlyOnce) {
    const std::uint64_t n = 3001, b = 7, c = 25, k = 3;
    for (const Remainder rem : {Remainder::drop, Remainder::mask}) {
        const PlanOptions o = chunked(b, c, k, rem);
        const std::uint64_t steps_at_4 = mpistage::plan_totals(n, 4, o).steps;
        for (const std::uint64_t done : {std::uint64_t{0}, std::uint64_t{1}, steps_at_4 / 2}) {
            for (const int w2 : {1, 3, 5}) {
                std::multiset<std::int64_t> ids;
                for (int r = 0; r < 4; ++r) {  // the first `done` steps at W = 4
                    const EpochPlan p = mpistage::plan_epoch(n, 4, r, o, 2);
                    for (std::uint64_t i = 0; i < done * b; ++i) {
                        if (p.valid[i]) ids.insert(p.ids[i]);
                    }
                }
                const EpochStart start{done, done * 4 * b, 4};  // the order of the W = 4 run
                for (int r = 0; r < w2; ++r) {
                    const EpochPlan p = mpistage::plan_epoch(n, w2, r, o, 2, start);
                    for (std::uint64_t i = 0; i < p.ids.size(); ++i) {
                        if (p.valid[i]) ids.insert(p.ids[i]);
                    }
                }
                const std::uint64_t expect =
                    rem == Remainder::drop
                        ? done * 4 * b + mpistage::plan_totals(n, w2, o, start).valid_samples
                        : n;
                EXPECT_EQ(ids.size(), expect) << "done " << done << " W' " << w2;
                EXPECT_EQ(std::set<std::int64_t>(ids.begin(), ids.end()).size(), ids.size())
                    << "a sample served twice, done " << done << " W' " << w2;
            }
        }
    }
}

TEST(PlanChunks, WholeStepIdsAreTheRanksBatches) {
    const std::uint64_t n = 500, b = 6;
    const PlanOptions o = chunked(b, 10, 3, Remainder::pad);
    for (const int w : {2, 3}) {
        const auto totals = mpistage::plan_totals(n, w, o);
        for (std::uint64_t s = 0; s < totals.steps; ++s) {
            const auto ids = mpistage::global_step_ids(n, w, o, 1, {}, s);
            for (int r = 0; r < w; ++r) {
                const EpochPlan p = mpistage::plan_epoch(n, w, r, o, 1);
                for (std::uint64_t j = 0; j < b; ++j) {
                    EXPECT_EQ(ids[static_cast<std::size_t>(r) * b + j], p.ids[s * b + j]);
                }
            }
        }
    }
}

TEST(PlanChunks, OptionsThatDoNotFitAreRefusedByName) {
    PlanOptions o = chunked(4, 10, 2);
    o.sharding = Sharding::byte_range;
    EXPECT_THROW(o.validate(), mpistage::ConfigError);
    o = chunked(4, 10, 2);
    o.budget.batch_bytes = 1000;
    o.budget.max_batch_samples = 8;
    EXPECT_NO_THROW(o.validate()) << "budget batches pack each rank's part";
    o = chunked(4, 10, 2);
    o.balance_steps = true;
    EXPECT_THROW(o.validate(), mpistage::ConfigError);
    o = chunked(4, 10, 2);
    o.shuffle = Shuffle::global;
    try {
        o.validate();
        ADD_FAILURE() << "chunk_samples with shuffle global accepted";
    } catch (const mpistage::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("chunk_samples"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)mpistage::plan_epoch(100, 2, 0, chunked(4, 0, 2), 0), mpistage::ConfigError);
    EXPECT_EQ(mpistage::parse_shuffle("chunks"), Shuffle::chunks);
}

}  // namespace
