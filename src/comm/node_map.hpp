#pragma once
// The node map of a communicator: which node each rank is on, and this rank's node
// communicator (internal; the memory tier builds its node-shared windows on it). In comm/ with
// the other communicator splits, so no layer above makes raw MPI collectives.

#include <mpi.h>

#include <vector>

namespace mpistage::detail {

/// Move-only owner of an MPI communicator made by the library (the tier's node communicator) (freed
/// with MPI_Comm_free).
class OwnedComm {
public:
    OwnedComm() = default;
    explicit OwnedComm(MPI_Comm c) noexcept : comm_(c) {}
    OwnedComm(OwnedComm&& o) noexcept;
    OwnedComm& operator=(OwnedComm&& o) noexcept;
    OwnedComm(const OwnedComm&) = delete;
    OwnedComm& operator=(const OwnedComm&) = delete;
    ~OwnedComm();
    MPI_Comm get() const noexcept { return comm_; }

private:
    MPI_Comm comm_ = MPI_COMM_NULL;
};

/// Which node each rank of a communicator is on, and this rank's node communicator.
struct NodeMap {
    OwnedComm node_comm;
    /// Node number of every rank (nodes numbered by their lowest rank's order).
    std::vector<int> node_of;
    /// Rank of every rank inside its node communicator.
    std::vector<int> node_rank_of;
    int num_nodes = 1;
};

/// Collective over `comm`: splits it into nodes (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`,
/// or groups of `ranks_per_node` consecutive ranks when > 0, for tests) and allgathers the map.
/// @throws MpiError.
NodeMap make_node_map(MPI_Comm comm, int ranks_per_node);

}  // namespace mpistage::detail
