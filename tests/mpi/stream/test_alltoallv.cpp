// Communicator::alltoallv, the exchange behind hash routing and rebalancing of streams:
// personalised messages of different sizes (empty included) arrive from the right rank intact.
#include <gtest/gtest.h>

#include "mpistage/comm.hpp"

namespace {

using namespace mpistage;

std::string message(int from, int to) {
    std::string m(static_cast<std::size_t>((from * 7 + to * 3) % 5) * 1000, '\0');
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<char>(from * 31 + to + i);
    return m;
}

TEST(Alltoallv, EveryRankGetsWhatEachRankSentIt) {
    Communicator comm(MPI_COMM_WORLD);
    const int w = comm.size();
    std::vector<std::string> out;
    for (int to = 0; to < w; ++to) out.push_back(message(comm.rank(), to));
    const auto got = comm.alltoallv(out);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(w));  // the same on every rank
    for (int from = 0; from < w; ++from) {
        EXPECT_EQ(got[static_cast<std::size_t>(from)], message(from, comm.rank())) << from;
    }
    // All empty: still a valid exchange.
    const auto none = comm.alltoallv(std::vector<std::string>(static_cast<std::size_t>(w)));
    for (const auto& m : none) EXPECT_TRUE(m.empty());
}

TEST(Alltoallv, WrongMessageCountIsAConfigError) {
    Communicator comm(MPI_COMM_WORLD);
    // Local check before any collective: every rank passes the same wrong count.
    EXPECT_THROW(
        comm.alltoallv(std::vector<std::string>(static_cast<std::size_t>(comm.size()) + 1)),
        ConfigError);
}

}  // namespace
