#pragma once
// Memory that every rank of a node can load from and every other rank can MPI_Get from: one
// segment per rank in an MPI-3 shared-memory window of its node, plus (when the job spans more
// than one node) a window over the whole communicator exposing the same bytes (internal). Used
// by the memory tier (staged samples) and the TFRecord source (record descriptors held once per
// node).

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/node_map.hpp"
#include "mpistage/comm.hpp"

namespace mpistage::detail {

/// How a `NodeSegment` lays out the segments of a node.
struct SegmentLayout {
    /// True: the node's segments back to back in node-rank order (MPI's default layout), so
    /// `node_base()` starts one array of the node's total bytes. False: each rank's segment on
    /// its own pages (`alloc_shared_noncontig`, first touch by its owner, NUMA-friendly).
    bool contiguous = false;
    /// Also expose the bytes to ranks of other nodes for `get` (an `MPI_Win_create` over the
    /// whole communicator) when the job spans several nodes.
    bool cross_node = true;
};

/// One rank's segment of `size_bytes` in a node-wide shared window; other ranks of the node
/// read it with plain loads (`base(node_rank)`), ranks of other nodes with `get`.
/// Construction and destruction are collective over the node communicator (and over `comm`
/// when the job spans several nodes). Move-only.
class NodeSegment {
public:
    NodeSegment() = default;
    /// Collective over `comm` (every rank of `comm` constructs its segment at the same point).
    /// First checks that the node's segments fit in the free space of the file system that
    /// backs MPI's shared windows (Open MPI's `osc_sm_backing_directory`, /dev/shm by default).
    /// The window's teardown (`MPI_Win_free`) is watched with `comm`'s timeout.
    /// @param purpose what the window holds, first in the error ("memory tier of a.h5").
    /// @param advice how the user can do without so large a window, in the error.
    /// @throws ConfigError (agreed) naming both sizes and the directory when it does not fit;
    ///         MpiError naming the call and the bytes.
    NodeSegment(const Communicator& comm, const NodeMap& nodes, std::uint64_t size_bytes,
                SegmentLayout layout = {}, const std::string& purpose = "node window",
                const std::string& advice = "use fewer bytes per node");
    NodeSegment(NodeSegment&& o) noexcept;
    NodeSegment& operator=(NodeSegment&& o) noexcept;
    NodeSegment(const NodeSegment&) = delete;
    NodeSegment& operator=(const NodeSegment&) = delete;
    /// Collective (MPI_Win_free, under a `BlockingWatch` with the deadline of the communicator
    /// the window was made on); call at the same point on every rank.
    ~NodeSegment();

    /// This rank's own segment (writable while staging).
    std::byte* mine() const noexcept { return mine_; }
    std::uint64_t size_bytes() const noexcept { return size_; }
    /// The segment of the rank with node rank `node_rank` on this node (plain loads).
    const std::byte* base(int node_rank) const noexcept {
        return bases_[static_cast<std::size_t>(node_rank)];
    }
    /// Ranks of the node (0 for a segment never allocated).
    int node_size() const noexcept { return static_cast<int>(bases_.size()); }
    /// Bytes of the segment of node rank `node_rank`.
    std::uint64_t size_bytes(int node_rank) const noexcept {
        return sizes_[static_cast<std::size_t>(node_rank)];
    }
    /// With `SegmentLayout::contiguous`: the first byte of the node's array (the segments of
    /// node ranks 0, 1, ... back to back); null when every segment of the node is empty.
    const std::byte* node_base() const noexcept { return node_base_; }
    /// Collective over `comm`: makes this rank's stores visible to the node's loads and to
    /// other nodes' gets (MPI_Win_sync, barrier, MPI_Win_sync). The barrier is the watched
    /// `Communicator::barrier`, so a rank that never finishes staging is reported by the
    /// watchdog instead of hanging the others. @throws MpiError.
    void publish(const Communicator& comm) const;
    /// Independent: copies `bytes` at `offset_bytes` of rank `rank`'s segment into `dst` with
    /// MPI_Get (pieces below INT_MAX) and waits for them (MPI_Win_flush_local). Needs the
    /// cross-node window (`remote()`). @throws MpiError naming the rank and offset.
    void get(std::byte* dst, std::uint64_t bytes, int rank, std::uint64_t offset_bytes) const;
    /// Independent: starts the MPI_Gets of `get` without waiting; `dst` must stay valid and
    /// untouched until `flush_gets`. Needs the cross-node window. @throws MpiError as `get`.
    void get_nowait(std::byte* dst, std::uint64_t bytes, int rank,
                    std::uint64_t offset_bytes) const;
    /// Independent: waits for every `get_nowait` of this rank (one MPI_Win_flush_local_all).
    /// @throws MpiError.
    void flush_gets() const;
    /// Local: maps this rank's own segment for writing in one call (`populate_pages`), so the
    /// staging read that follows does not fault page by page. Returns false when the kernel
    /// lacks MADV_POPULATE_WRITE and a touch pass did it. Never throws.
    bool populate_mine() const noexcept;
    /// Local: maps the segments of every rank of the node into this process's page table for
    /// reading (MADV_POPULATE_READ; a load per page where the kernel lacks it), so the first
    /// epoch does not fault per page of its peers' samples. Call after `publish`. Returns false
    /// when the kernel lacks MADV_POPULATE_READ.
    bool populate_node() const noexcept;
    /// True when a cross-node window exists (the job spans several nodes).
    bool remote() const noexcept { return remote_win_ != MPI_WIN_NULL; }

private:
    void release() noexcept;
    MPI_Win shm_win_ = MPI_WIN_NULL;
    MPI_Win remote_win_ = MPI_WIN_NULL;
    std::byte* mine_ = nullptr;
    std::uint64_t size_ = 0;
    std::vector<const std::byte*> bases_;
    std::vector<std::uint64_t> sizes_;  ///< bytes of each node rank's segment
    const std::byte* node_base_ = nullptr;
    std::chrono::seconds timeout_{0};  // the watchdog deadline of MPI_Win_free
    int ranks_ = 1;                    // ranks of the communicator the window was made on
};

}  // namespace mpistage::detail
