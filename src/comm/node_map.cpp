#include "comm/node_map.hpp"

#include <algorithm>
#include <utility>

#include "mpistage/comm.hpp"

namespace mpistage::detail {

OwnedComm::OwnedComm(OwnedComm&& o) noexcept : comm_(std::exchange(o.comm_, MPI_COMM_NULL)) {}

OwnedComm& OwnedComm::operator=(OwnedComm&& o) noexcept {
    if (this != &o) {
        if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
        comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
    }
    return *this;
}

OwnedComm::~OwnedComm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

std::shared_ptr<const OwnedComm> NodeAccess::node_comm(const Communicator& comm) {
    comm.split_node();
    return comm.node_->comm;
}

NodeMap make_node_map(const Communicator& communicator, int ranks_per_node) {
    const MPI_Comm comm = communicator.get();
    const int rank = communicator.rank();
    const int size = communicator.size();
    NodeMap map;
    if (ranks_per_node > 0) {
        MPI_Comm node = MPI_COMM_NULL;
        check_mpi(MPI_Comm_split(comm, rank / ranks_per_node, rank, &node),
                  "tier: MPI_Comm_split(test nodes)");
        map.node_comm = std::make_shared<const OwnedComm>(node);
    } else {
        // The communicator's one node split (made once, shared): no second
        // MPI_Comm_split_type for the windows of a loader or source (issue 38).
        map.node_comm = NodeAccess::node_comm(communicator);
    }
    const MPI_Comm node = map.comm();
    int mine[2] = {rank, 0};  // {lowest rank of my node, my node rank}
    check_mpi(MPI_Allreduce(&rank, &mine[0], 1, MPI_INT, MPI_MIN, node),
              "tier: MPI_Allreduce(node leader)");
    check_mpi(MPI_Comm_rank(node, &mine[1]), "tier: MPI_Comm_rank(node)");
    std::vector<int> all(2 * static_cast<std::size_t>(size));
    check_mpi(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm),
              "tier: MPI_Allgather(node map)");
    std::vector<int> leaders;
    for (int r = 0; r < size; ++r) leaders.push_back(all[2 * static_cast<std::size_t>(r)]);
    std::vector<int> distinct = leaders;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    map.num_nodes = static_cast<int>(distinct.size());
    for (int r = 0; r < size; ++r) {
        const auto it = std::lower_bound(distinct.begin(), distinct.end(), leaders[r]);
        map.node_of.push_back(static_cast<int>(it - distinct.begin()));
        map.node_rank_of.push_back(all[2 * static_cast<std::size_t>(r) + 1]);
    }
    return map;
}

}  // namespace mpistage::detail
