#include "comm/node_segment.hpp"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "comm/agree.hpp"
#include "comm/blocking_watch.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "util/page_populate.hpp"

namespace mpistage::detail {

namespace {

/// A string control variable of the MPI library through the MPI tool interface (MPI-3.1
/// MPI_T_cvar_*); empty when the library has no variable of that name.
std::string mpi_string_cvar(const char* name) {
    // Asked for the thread level MPI_Init_thread gave: Open MPI 4.1's MPI_T_init_thread stores
    // the level it is asked for as the process's (ompi_mpi_thread_level), so asking for
    // MPI_THREAD_SINGLE turned a MPI_THREAD_MULTIPLE job into one that MPI_Query_thread reports
    // as single-threaded (the loader then started no I/O thread).
    int level = MPI_THREAD_SINGLE;
    check_mpi(MPI_Query_thread(&level), "node window: MPI_Query_thread");
    int provided = 0;
    if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return {};
    std::string value;
    int index = 0;
    if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS) {
        MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
        int count = 0;
        if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
            if (count > 0 && count < 65536) {
                std::vector<char> buf(static_cast<std::size_t>(count) + 1, '\0');
                if (MPI_T_cvar_read(handle, buf.data()) == MPI_SUCCESS) value = buf.data();
            }
            MPI_T_cvar_handle_free(&handle);
        }
    }
    MPI_T_finalize();
    return value;
}

/// The directory whose file system backs MPI's shared-memory windows: Open MPI's
/// `osc_sm_backing_directory` (default /dev/shm on Linux; set by OMPI_MCA_osc_sm_backing_directory
/// or `--mca`), else /dev/shm where it exists (MPICH and its derivatives map files there); empty
/// when neither is known, and the capacity is then not checked.
std::string window_backing_directory() {
    // Read once a process: Open MPI's MPI_T_init_thread/MPI_T_finalize open and close every MCA
    // component (dlopen/dlclose, about 0.25 s), which made each memory-tier Loader that slow.
    static const std::string cvar = mpi_string_cvar("osc_sm_backing_directory");
    std::string dir = cvar;
    if (dir.empty()) dir = "/dev/shm";
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {};
    return dir;
}

/// Collective over `comm` (every rank of `nodes`' node communicator constructs the window at
/// the same point): refuses a node window whose bytes, summed over the node's ranks, exceed the
/// free space of the file system that backs it. Without the check Open MPI prints a warning and
/// one rank never returns from MPI_Win_allocate_shared, so the job waits its whole timeout and
/// the watchdog blames a stopped rank. @throws ConfigError (agreed) naming both sizes.
void check_window_capacity(const Communicator& comm, const NodeMap& nodes,
                           std::uint64_t size_bytes, const std::string& purpose,
                           const std::string& advice) {
    unsigned long long node_bytes = 0;
    unsigned long long mine = size_bytes;
    check_mpi(MPI_Allreduce(&mine, &node_bytes, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, nodes.comm()),
              "node window: MPI_Allreduce(node bytes)");
    int node_size = 1;
    check_mpi(MPI_Comm_size(nodes.comm(), &node_size), "node window: MPI_Comm_size(node)");
    LocalStatus status = capture([&] {
        if (node_bytes == 0) return;
        const std::string dir = window_backing_directory();
        struct statvfs fs {};
        if (dir.empty() || ::statvfs(dir.c_str(), &fs) != 0) return;
        const std::uint64_t free_bytes =
            static_cast<std::uint64_t>(fs.f_bavail) * static_cast<std::uint64_t>(fs.f_frsize);
        // The library rounds each rank's segment up to pages and keeps a page of state a rank.
        const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
        const std::uint64_t needed = node_bytes + 2 * page * static_cast<std::uint64_t>(node_size);
        if (needed <= free_bytes) return;
        throw ConfigError(purpose + ": the node's shared-memory window needs " +
                          std::to_string(needed) + " bytes (" + std::to_string(node_size) +
                          " rank(s) of this node) but " + dir + " has " +
                          std::to_string(free_bytes) +
                          " bytes free (MPI backs shared windows with files there); " + advice +
                          ", or give " + dir +
                          " more room (a larger tmpfs: `mount -o remount,size=...`; Open MPI: "
                          "OMPI_MCA_osc_sm_backing_directory=<a larger local directory>)");
    });
    agree_or_throw(comm, status);
}

}  // namespace

NodeSegment::NodeSegment(const Communicator& watch_comm, const NodeMap& nodes,
                         std::uint64_t size_bytes, SegmentLayout layout,
                         const std::string& purpose, const std::string& advice)
    : size_(size_bytes), timeout_(watch_comm.timeout()), ranks_(watch_comm.size()) {
    check_window_capacity(watch_comm, nodes, size_bytes, purpose, advice);
    const MPI_Comm comm = watch_comm.get();
    const std::string what =
        "node window: MPI_Win_allocate_shared(" + std::to_string(size_bytes) + " bytes)";
    MPI_Info info = MPI_INFO_NULL;
    check_mpi(MPI_Info_create(&info), "node window: MPI_Info_create");
    // Each rank's segment on its own pages (first touch by its owner, NUMA-friendly), unless
    // the node's segments must form one array.
    if (!layout.contiguous) MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(size_bytes), 1, info, nodes.comm(),
                                           &base, &shm_win_);
    MPI_Info_free(&info);
    check_mpi(rc, what.c_str());
    MPI_Win_set_errhandler(shm_win_, MPI_ERRORS_RETURN);
    mine_ = static_cast<std::byte*>(base);
    int node_size = 1;
    check_mpi(MPI_Comm_size(nodes.comm(), &node_size), "node window: MPI_Comm_size(node)");
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
