// The personalised exchange of the communicator (hash routing and rebalancing of streams).
#include <mpi.h>

#include <limits>

#include "mpistage/comm.hpp"

namespace mpistage {

std::vector<std::string> Communicator::alltoallv(const std::vector<std::string>& to_each) const {
    const auto w = static_cast<std::size_t>(size_);
    if (to_each.size() != w) {
        throw ConfigError("comm: alltoallv needs one message per rank (" + std::to_string(w) +
                          "), got " + std::to_string(to_each.size()));
    }
    std::vector<std::uint64_t> send_sizes(w);
    std::vector<std::uint64_t> recv_sizes(w);
    std::uint64_t largest = 0;
    for (std::size_t r = 0; r < w; ++r) {
        send_sizes[r] = to_each[r].size();
        largest = std::max(largest, send_sizes[r]);
    }
    watched("MPI_Ialltoall(sizes)", [&](MPI_Request* q) {
        return MPI_Ialltoall(send_sizes.data(), 1, MPI_UINT64_T, recv_sizes.data(), 1, MPI_UINT64_T,
                             comm_, q);
    });
    // Counts and displacements of MPI_Alltoallv are ints: agree before using them.
    const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<int>::max());
    std::uint64_t total_send = 0;
    std::uint64_t total_recv = 0;
    for (std::size_t r = 0; r < w; ++r) {
        total_send += send_sizes[r];
        total_recv += recv_sizes[r];
    }
    if (allreduce_max(std::max({largest, total_send, total_recv})) > limit) {
        throw ConfigError("comm: alltoallv of 2 GiB or more on one rank is not supported");
    }
    std::vector<int> sc(w), sd(w), rc(w), rd(w);
    std::string send_buf;
    send_buf.reserve(total_send);
    std::size_t at = 0;
    for (std::size_t r = 0; r < w; ++r) {
        sc[r] = static_cast<int>(send_sizes[r]);
        sd[r] = static_cast<int>(send_buf.size());
        send_buf += to_each[r];
        rc[r] = static_cast<int>(recv_sizes[r]);
        rd[r] = static_cast<int>(at);
        at += recv_sizes[r];
    }
    std::string recv_buf(total_recv, '\0');
    watched("MPI_Ialltoallv", [&](MPI_Request* q) {
        return MPI_Ialltoallv(send_buf.data(), sc.data(), sd.data(), MPI_BYTE, recv_buf.data(),
                              rc.data(), rd.data(), MPI_BYTE, comm_, q);
    });
    std::vector<std::string> out(w);
    for (std::size_t r = 0; r < w; ++r) out[r] = recv_buf.substr(rd[r], rc[r]);
    return out;
}

}  // namespace mpistage
