// The personalised exchange of the communicator (hash routing and rebalancing of streams, the
// two-phase reads).
#include <mpi.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "mpistage/comm.hpp"

namespace mpistage {

std::vector<std::string> Communicator::alltoallv(const std::vector<std::string>& to_each) const {
    const auto w = static_cast<std::size_t>(size_);
    if (to_each.size() != w) {
        throw ConfigError("comm: alltoallv needs one message per rank (" + std::to_string(w) +
                          "), got " + std::to_string(to_each.size()));
    }
    std::vector<std::uint64_t> send_offsets(w + 1, 0);
    for (std::size_t r = 0; r < w; ++r) send_offsets[r + 1] = send_offsets[r] + to_each[r].size();
    std::string send;
    send.reserve(send_offsets[w]);
    for (const auto& m : to_each) send += m;
    std::string recv;
    std::vector<std::uint64_t> recv_offsets;
    alltoallv(send, send_offsets, recv, recv_offsets);
    std::vector<std::string> out(w);
    for (std::size_t r = 0; r < w; ++r) {
        out[r] = recv.substr(recv_offsets[r], recv_offsets[r + 1] - recv_offsets[r]);
    }
    return out;
}

void Communicator::alltoallv(const std::string& send,
                             const std::vector<std::uint64_t>& send_offsets, std::string& recv,
                             std::vector<std::uint64_t>& recv_offsets) const {
    const auto w = static_cast<std::size_t>(size_);
    // Offsets that do not describe the send buffer (a caller's bug, on one rank or more): that
    // rank sends nothing and poisons the agreement below, so every rank throws the same error.
    bool fits = send_offsets.size() == w + 1 && send_offsets.front() == 0 &&
                send_offsets.back() == send.size();
    for (std::size_t r = 0; fits && r < w; ++r) fits = send_offsets[r] <= send_offsets[r + 1];
    std::vector<std::uint64_t> send_sizes(w, 0);
    std::vector<std::uint64_t> recv_sizes(w);
    for (std::size_t r = 0; fits && r < w; ++r)
        send_sizes[r] = send_offsets[r + 1] - send_offsets[r];
    watched("MPI_Ialltoall(sizes)", [&](MPI_Request* q) {
        return MPI_Ialltoall(send_sizes.data(), 1, MPI_UINT64_T, recv_sizes.data(), 1, MPI_UINT64_T,
                             comm_, q);
    });
    std::vector<std::uint64_t> offsets(w + 1, 0);
    for (std::size_t r = 0; r < w; ++r) offsets[r + 1] = offsets[r] + recv_sizes[r];
    // Counts and displacements of MPI_Alltoallv are ints: agree before using them.
    const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<int>::max());
    constexpr std::uint64_t kBadOffsets = std::numeric_limits<std::uint64_t>::max();
    const std::uint64_t largest = allreduce_max(
        fits ? std::max(static_cast<std::uint64_t>(send.size()), offsets[w]) : kBadOffsets);
    if (largest == kBadOffsets) {
        throw ConfigError("comm: alltoallv: a rank passed send offsets that are not " +
                          std::to_string(w + 1) +
                          " ascending offsets from 0 to its send "
                          "buffer's size");
    }
    if (largest > limit) {
        throw ConfigError("comm: alltoallv of 2 GiB or more on one rank is not supported");
    }
    recv_offsets = std::move(offsets);
    std::vector<int> sc(w), sd(w), rc(w), rd(w);
    for (std::size_t r = 0; r < w; ++r) {
        sc[r] = static_cast<int>(send_sizes[r]);
        sd[r] = static_cast<int>(send_offsets[r]);
        rc[r] = static_cast<int>(recv_sizes[r]);
        rd[r] = static_cast<int>(recv_offsets[r]);
    }
    recv.resize(recv_offsets[w]);
    watched("MPI_Ialltoallv", [&](MPI_Request* q) {
        return MPI_Ialltoallv(send.data(), sc.data(), sd.data(), MPI_BYTE, recv.data(), rc.data(),
                              rd.data(), MPI_BYTE, comm_, q);
    });
}

}  // namespace mpistage
