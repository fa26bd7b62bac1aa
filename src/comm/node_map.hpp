#pragma once
// The node map of a communicator: which node each rank is on, and this rank's node
// communicator (internal; the memory tier builds its node-shared windows on it). In comm/ with
// the other communicator splits, so no layer above makes raw MPI collectives.

#include <mpi.h>

#include <memory>
#include <vector>

#include "mpistage/comm.hpp"

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

/// A communicator's node split (`Communicator::split_node`): this rank's place on its node and
/// the node communicator, shared by the communicator that split, the ones duplicated from it
/// afterwards and the node maps made on it (freed with the last of them).
struct NodeState {
    int rank = 0;
    int size = 1;
    std::shared_ptr<const OwnedComm> comm;
};

/// Internal access to a `Communicator`'s node split (the public header keeps it opaque).
struct NodeAccess {
    /// The node communicator of `comm`, made by `comm.split_node()` (collective the first
    /// time, see there).
    static std::shared_ptr<const OwnedComm> node_comm(const Communicator& comm);
};

/// Which node each rank of a communicator is on, and this rank's node communicator.
struct NodeMap {
    /// Shared: the communicator's own node split, or the test "nodes" of `ranks_per_node`.
    std::shared_ptr<const OwnedComm> node_comm;
    MPI_Comm comm() const noexcept { return node_comm ? node_comm->get() : MPI_COMM_NULL; }
    /// Node number of every rank (nodes numbered by their lowest rank's order).
    std::vector<int> node_of;
    /// Rank of every rank inside its node communicator.
    std::vector<int> node_rank_of;
    int num_nodes = 1;
};

/// Collective over `comm`: its node communicator (`comm.split_node()`: the one node split, made
/// here unless `comm` has it already; or, when `ranks_per_node` > 0, for tests, groups of that
/// many consecutive ranks by `MPI_Comm_split`) and the map, allgathered. Blocking: the caller
/// holds a `BlockingWatch`. @throws MpiError.
NodeMap make_node_map(const Communicator& comm, int ranks_per_node);

}  // namespace mpistage::detail
