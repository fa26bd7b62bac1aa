// Communicator::alltoallv, the exchange behind hash routing and rebalancing of streams and the
// two-phase reads: personalised messages of different sizes (empty included) arrive from the
// right rank intact, through the per-message form and the packed form with reused buffers.
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

// The packed form, as the two-phase reader calls it every step: the receive buffers of a
// larger exchange are reused by a smaller one (and the reverse) without stale bytes or offsets.
TEST(Alltoallv, PackedBuffersAreReusedAcrossExchanges) {
    Communicator comm(MPI_COMM_WORLD);
    const auto w = static_cast<std::size_t>(comm.size());
    std::string recv;
    std::vector<std::uint64_t> recv_offsets;
    for (const int scale : {3, 1, 0, 2}) {
        std::string send;
        std::vector<std::uint64_t> offsets{0};
        for (std::size_t to = 0; to < w; ++to) {
            const std::string m = message(comm.rank(), static_cast<int>(to))
                                      .substr(0, static_cast<std::size_t>(scale) * 400);
            send += m;
            offsets.push_back(send.size());
        }
        comm.alltoallv(send, offsets, recv, recv_offsets);
        ASSERT_EQ(recv_offsets.size(), w + 1);
        EXPECT_EQ(recv_offsets.back(), recv.size());
        for (std::size_t from = 0; from < w; ++from) {
            const std::string want = message(static_cast<int>(from), comm.rank())
                                         .substr(0, static_cast<std::size_t>(scale) * 400);
            EXPECT_EQ(recv.substr(recv_offsets[from], recv_offsets[from + 1] - recv_offsets[from]),
                      want)
                << "scale " << scale << " from " << from;
        }
    }
    // Offsets that do not describe the buffer on the last rank only: the same ConfigError on
    // every rank (no rank left waiting in the exchange), and the receive offsets untouched.
    const bool bad = comm.rank() == comm.size() - 1;
    std::vector<std::uint64_t> offsets(w + 1, 0);
    if (!bad) offsets.back() = 4;
    const auto before = recv_offsets;
    try {
        comm.alltoallv(std::string(4, 'x'), offsets, recv, recv_offsets);
        ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("send offsets"), std::string::npos) << e.what();
    }
    EXPECT_EQ(recv_offsets, before);
}

TEST(Alltoallv, WrongMessageCountIsAConfigError) {
    Communicator comm(MPI_COMM_WORLD);
    // Local check before any collective: every rank passes the same wrong count.
    EXPECT_THROW(
        comm.alltoallv(std::vector<std::string>(static_cast<std::size_t>(comm.size()) + 1)),
        ConfigError);
}

}  // namespace
