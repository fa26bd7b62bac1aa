// The communicator's vector collectives (allgatherv, gatherv, vector exscan and broadcast): the
// collectives that used to be raw MPI calls in the CLI and the TFRecord source.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mpistage/comm.hpp"

using namespace mpistage;

namespace {

struct Pair {
    std::uint32_t rank;
    std::uint64_t k;
};

/// Rank r contributes r elements (rank 0 none): {r, 0}, {r, 1}, ...
std::vector<Pair> contribution(int rank) {
    std::vector<Pair> v;
    for (std::uint64_t k = 0; k < static_cast<std::uint64_t>(rank); ++k)
        v.push_back({static_cast<std::uint32_t>(rank), k});
    return v;
}

void expect_concatenation(const std::vector<Pair>& all, int world_size) {
    std::size_t at = 0;
    for (int r = 0; r < world_size; ++r) {
        for (std::uint64_t k = 0; k < static_cast<std::uint64_t>(r); ++k, ++at) {
            ASSERT_LT(at, all.size());
            EXPECT_EQ(all[at].rank, static_cast<std::uint32_t>(r));
            EXPECT_EQ(all[at].k, k);
        }
    }
    EXPECT_EQ(all.size(), at);
}

}  // namespace

TEST(CommVector, AllgathervConcatenatesInRankOrderOnEveryRank) {
    const Communicator comm(MPI_COMM_WORLD);
    expect_concatenation(comm.allgatherv(contribution(comm.rank())), comm.size());
    // Nothing anywhere: an empty result, no hang.
    EXPECT_TRUE(comm.allgatherv(std::vector<std::int64_t>{}).empty());
}

TEST(CommVector, GathervOnlyTheRootReceives) {
    const Communicator comm(MPI_COMM_WORLD);
    const int root = comm.size() - 1;  // not rank 0 when W > 1
    const auto all = comm.gatherv(contribution(comm.rank()), root);
    if (comm.rank() == root) {
        expect_concatenation(all, comm.size());
    } else {
        EXPECT_TRUE(all.empty());
    }
}

TEST(CommVector, ExscanSumIsElementWiseAndZeroOnRankZero) {
    const Communicator comm(MPI_COMM_WORLD);
    const auto r = static_cast<std::uint64_t>(comm.rank());
    const auto out = comm.exscan_sum(std::vector<std::uint64_t>{1, r, 10 * r + 1});
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0], r);                              // sum of 1 over ranks < r
    EXPECT_EQ(out[1], r * (r - (r > 0 ? 1 : 0)) / 2);  // 0 + 1 + ... + (r - 1)
    EXPECT_EQ(out[2], 10 * (r * (r > 0 ? r - 1 : 0) / 2) + r);
    EXPECT_TRUE(comm.exscan_sum(std::vector<std::uint64_t>{}).empty());
}

TEST(CommVector, BroadcastCarriesTheRootsValues) {
    const Communicator comm(MPI_COMM_WORLD);
    const int root = comm.size() / 2;
    const auto r = static_cast<std::uint64_t>(comm.rank());
    const auto out = comm.broadcast(std::vector<std::uint64_t>{r, r + 7, ~r}, root);
    const auto want = static_cast<std::uint64_t>(root);
    EXPECT_EQ(out, (std::vector<std::uint64_t>{want, want + 7, ~want}));
}
