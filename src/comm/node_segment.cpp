#include "comm/node_segment.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "comm/blocking_watch.hpp"
#include "mpistage/comm.hpp"
#include "util/page_populate.hpp"

namespace mpistage::detail {

NodeSegment::NodeSegment(const Communicator& watch_comm, const NodeMap& nodes,
                         std::uint64_t size_bytes, SegmentLayout layout)
    : size_(size_bytes), timeout_(watch_comm.timeout()), ranks_(watch_comm.size()) {
    const MPI_Comm comm = watch_comm.get();
    const std::string what =
        "node window: MPI_Win_allocate_shared(" + std::to_string(size_bytes) + " bytes)";
    MPI_Info info = MPI_INFO_NULL;
    check_mpi(MPI_Info_create(&info), "node window: MPI_Info_create");
    // Each rank's segment on its own pages (first touch by its owner, NUMA-friendly), unless
    // the node's segments must form one array.
    if (!layout.contiguous) MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(size_bytes), 1, info,
                                           nodes.node_comm.get(), &base, &shm_win_);
    MPI_Info_free(&info);
    check_mpi(rc, what.c_str());
    MPI_Win_set_errhandler(shm_win_, MPI_ERRORS_RETURN);
    mine_ = static_cast<std::byte*>(base);
    int node_size = 1;
    check_mpi(MPI_Comm_size(nodes.node_comm.get(), &node_size), "node window: MPI_Comm_size(node)");
    for (int r = 0; r < node_size; ++r) {
        MPI_Aint bytes = 0;
        int unit = 1;
        void* p = nullptr;
        check_mpi(MPI_Win_shared_query(shm_win_, r, &bytes, &unit, &p),
                  "node window: MPI_Win_shared_query");
        bases_.push_back(static_cast<const std::byte*>(p));
        sizes_.push_back(static_cast<std::uint64_t>(bytes));
    }
    if (layout.contiguous) {
        // MPI_PROC_NULL: the segment of the lowest node rank with a non-empty one, which in the
        // contiguous layout is where the node's array starts.
        MPI_Aint bytes = 0;
        int unit = 1;
        void* p = nullptr;
        check_mpi(MPI_Win_shared_query(shm_win_, MPI_PROC_NULL, &bytes, &unit, &p),
                  "node window: MPI_Win_shared_query(MPI_PROC_NULL)");
        node_base_ = bytes > 0 ? static_cast<const std::byte*>(p) : nullptr;
    }
    check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, shm_win_), "node window: MPI_Win_lock_all(node)");
    if (nodes.num_nodes > 1 && layout.cross_node) {
        // The same bytes exposed to every rank for MPI_Get; one passive-target epoch for the
        // loader's lifetime, so a get needs no lock round trip.
        check_mpi(MPI_Win_create(mine_, static_cast<MPI_Aint>(size_bytes), 1, MPI_INFO_NULL, comm,
                                 &remote_win_),
                  "node window: MPI_Win_create(cross-node window)");
        MPI_Win_set_errhandler(remote_win_, MPI_ERRORS_RETURN);
        check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, remote_win_), "node window: MPI_Win_lock_all");
    }
}

NodeSegment::NodeSegment(NodeSegment&& o) noexcept
    : shm_win_(std::exchange(o.shm_win_, MPI_WIN_NULL)),
      remote_win_(std::exchange(o.remote_win_, MPI_WIN_NULL)),
      mine_(std::exchange(o.mine_, nullptr)),
      size_(o.size_),
      bases_(std::move(o.bases_)),
      sizes_(std::move(o.sizes_)),
      node_base_(std::exchange(o.node_base_, nullptr)),
      timeout_(o.timeout_),
      ranks_(o.ranks_) {}

NodeSegment& NodeSegment::operator=(NodeSegment&& o) noexcept {
    if (this != &o) {
        release();
        shm_win_ = std::exchange(o.shm_win_, MPI_WIN_NULL);
        remote_win_ = std::exchange(o.remote_win_, MPI_WIN_NULL);
        mine_ = std::exchange(o.mine_, nullptr);
        size_ = o.size_;
        bases_ = std::move(o.bases_);
        sizes_ = std::move(o.sizes_);
        node_base_ = std::exchange(o.node_base_, nullptr);
        timeout_ = o.timeout_;
        ranks_ = o.ranks_;
    }
    return *this;
}

NodeSegment::~NodeSegment() {
    release();
}

void NodeSegment::release() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    const bool any = remote_win_ != MPI_WIN_NULL || shm_win_ != MPI_WIN_NULL;
    const BlockingWatch watch(any ? timeout_ : std::chrono::seconds(0), ranks_,
                              "MPI_Win_free (node window)", "teardown: free the node-shared window");
    if (remote_win_ != MPI_WIN_NULL) {
        MPI_Win_unlock_all(remote_win_);
        MPI_Win_free(&remote_win_);
    }
    if (shm_win_ != MPI_WIN_NULL) {
        MPI_Win_unlock_all(shm_win_);
        MPI_Win_free(&shm_win_);
    }
    mine_ = nullptr;
    node_base_ = nullptr;
    bases_.clear();
    sizes_.clear();
}

void NodeSegment::publish(const Communicator& comm) const {
    check_mpi(MPI_Win_sync(shm_win_), "node window: MPI_Win_sync");
    if (remote_win_ != MPI_WIN_NULL)
        check_mpi(MPI_Win_sync(remote_win_), "node window: MPI_Win_sync");
    comm.barrier();
    check_mpi(MPI_Win_sync(shm_win_), "node window: MPI_Win_sync");
    if (remote_win_ != MPI_WIN_NULL)
        check_mpi(MPI_Win_sync(remote_win_), "node window: MPI_Win_sync");
}

void NodeSegment::get(std::byte* dst, std::uint64_t bytes, int rank,
                      std::uint64_t offset_bytes) const {
    get_nowait(dst, bytes, rank, offset_bytes);
    check_mpi(MPI_Win_flush_local(rank, remote_win_),
              ("node window: MPI_Win_flush_local(rank " + std::to_string(rank) + ")").c_str());
}

void NodeSegment::get_nowait(std::byte* dst, std::uint64_t bytes, int rank,
                             std::uint64_t offset_bytes) const {
    if (remote_win_ == MPI_WIN_NULL) {
        throw MpiError("node window: MPI_Get from rank " + std::to_string(rank) +
                       " without a cross-node window (internal error)");
    }
    constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
    for (std::uint64_t done = 0; done < bytes;) {
        const auto n = static_cast<int>(std::min(kPiece, bytes - done));
        const int rc =
            MPI_Get(dst + done, n, MPI_BYTE, rank, static_cast<MPI_Aint>(offset_bytes + done), n,
                    MPI_BYTE, remote_win_);
        if (rc != MPI_SUCCESS) {
            const std::string where = "node window: MPI_Get of " + std::to_string(bytes) +
                                      " bytes at offset " + std::to_string(offset_bytes) +
                                      " of rank " + std::to_string(rank);
            check_mpi(rc, where.c_str());
        }
        done += static_cast<std::uint64_t>(n);
    }
}

void NodeSegment::flush_gets() const {
    if (remote_win_ == MPI_WIN_NULL) return;
    check_mpi(MPI_Win_flush_local_all(remote_win_), "node window: MPI_Win_flush_local_all");
}

bool NodeSegment::populate_mine() const noexcept {
    return populate_pages(mine_, size_, PopulateFor::write);
}

bool NodeSegment::populate_node() const noexcept {
    bool all = true;
    for (std::size_t r = 0; r < bases_.size(); ++r) {
        // const_cast: madvise takes a non-const pointer; MADV_POPULATE_READ writes nothing.
        all =
            populate_pages(const_cast<std::byte*>(bases_[r]), sizes_[r], PopulateFor::read) && all;
    }
    return all;
}

}  // namespace mpistage::detail
