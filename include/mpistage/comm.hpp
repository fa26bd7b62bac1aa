#pragma once
/// @file
/// RAII communicator: the library's own duplicate of the user's communicator, with watched
/// (deadline-bounded) collectives.

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "mpistage/error.hpp"

namespace mpistage {

/// Largest accepted watchdog deadline (30 days): far beyond any collective's wait, and far
/// below where `steady_clock::now() + timeout` would overflow (about 292 years of ns).
constexpr std::chrono::seconds kMaxTimeout{30LL * 24 * 3600};

/// Local: checks a watchdog deadline given by a user (0 = watchdog off).
/// @throws ConfigError naming `what`, the value and the accepted range [0, kMaxTimeout]
///         when `timeout` is negative or above `kMaxTimeout`.
void check_timeout(std::chrono::seconds timeout, const std::string& what);

/// Throws `MpiError` naming `call` and the MPI error text when `rc != MPI_SUCCESS`.
void check_mpi(int rc, const char* call);

/// Default watchdog deadline of a communicator's collectives.
constexpr std::chrono::seconds kDefaultCollectiveTimeout{300};

/// What a rank is doing when it enters a collective: shown in the watchdog's report when a
/// collective does not complete in time. Unset numbers are −1, unset texts empty.
struct CollectiveContext {
    std::string phase;         ///< e.g. "loader: agree on batch"
    std::int64_t epoch = -1;   ///< epoch being staged
    std::int64_t step = -1;    ///< step (batch) of that epoch
    std::string file;          ///< file being read, if any
    std::int64_t offset = -1;  ///< byte offset in `file`
    /// "phase, epoch E, step S, file F, offset O" without the unset parts.
    std::string describe() const;
};

namespace detail {
struct WatchState;
class PendingAllreduce;
}  // namespace detail

/// The library's own communicator: an `MPI_Comm_dup` of the user's communicator with
/// `MPI_ERRORS_RETURN` set, plus the node-local communicator from
/// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` (never launcher environment variables, which are
/// wrong under `mpirun` inside `sbatch`).
///
/// Lifetime: every public constructor of the library (sources, `Loader`) takes a
/// `const Communicator&` that is borrowed for the call only; the object keeps its own
/// `MPI_Comm_dup`, so the caller's communicator may be destroyed afterwards.
///
/// Watchdog: every collective below is a non-blocking MPI call (`MPI_Iallreduce`, `MPI_Ibcast`,
/// ...) polled with a short, growing sleep (a waiting rank does not spin at full CPU) until
/// `timeout()`. When a collective does not complete in time, the ranks that are waiting tell
/// each other what they are doing (point-to-point, only at that moment, so the steady-state
/// cost is the polling alone); the lowest waiting rank prints which ranks did not arrive and
/// what each rank was doing (`CollectiveContext`) to stderr and calls `MPI_Abort`, so the job
/// ends with a message instead of hanging. Uses the MPI thread level the caller initialised;
/// all calls are made from the calling thread (MPI_THREAD_FUNNELED suffices).
///
/// Move-only. Construction is collective over `user_comm`. Freeing is collective in MPI terms;
/// call `free()` on every rank at the same point, the destructor is a no-throw fallback that
/// frees only while MPI is still initialised. Not thread-safe: one thread at a time.
class Communicator {
public:
    /// Collective over `user_comm`; the watchdog deadline starts at `timeout`
    /// (`kDefaultCollectiveTimeout` unless given).
    ///
    /// Not `explicit`, on purpose: every public constructor that takes a `const Communicator&`
    /// also accepts a plain `MPI_Comm` (`Loader loader(MPI_COMM_WORLD, source, options)`). The
    /// conversion builds a temporary `Communicator` at that call, which duplicates and splits
    /// `user_comm` collectively; the constructor being called is itself collective over the same
    /// ranks, so every rank converts at the same point. The temporary lives until the end of the
    /// call; the constructed object keeps its own duplicate (`duplicate()`: one more `MPI_Comm_dup`,
    /// no split). Each conversion costs one `MPI_Comm_dup` and one `MPI_Comm_split_type`: build
    /// one `Communicator` and pass it when constructing many objects. `user_comm` is borrowed, never freed.
    ///
    /// Launcher check (local, before any collective): when `MPI_COMM_WORLD` has one rank but the
    /// environment says the job has more tasks (`WORLD_SIZE`/`LOCAL_WORLD_SIZE` from torchrun,
    /// `SLURM_STEP_NUM_TASKS`/`SLURM_NTASKS`/`SLURM_NPROCS` without an MPI launcher's count,
    /// `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`, `PMIX_SIZE`, `MV2_COMM_WORLD_SIZE`), the process was
    /// not started by the MPI launcher and would read the whole dataset: a `ConfigError` naming
    /// both counts, the variable and how to launch (`mpirun -n N`, `srun --mpi=pmix -n N`).
    /// `MPISTAGE_ALLOW_SINGLETON=1` in the environment turns the check off (one process
    /// intended). See docs/launching.md.
    /// @throws ConfigError on a launcher mismatch or `MPI_COMM_NULL`; MpiError when MPI is not
    ///         initialised or duplication or splitting fails.
    ///
    /// `timeout` is the watchdog deadline of the duplication and the node split themselves
    /// (each under a `BlockingWatch`: a rank that never arrives ends the job with exit code 70
    /// after `timeout`) and of every later collective (`set_timeout` changes it).
    Communicator(MPI_Comm user_comm,  // NOLINT(google-explicit-constructor): see above
                 std::chrono::seconds timeout = kDefaultCollectiveTimeout);
    Communicator(Communicator&& other) noexcept;
    Communicator& operator=(Communicator&& other) noexcept;
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;
    ~Communicator();

    /// Collective over this communicator: the library object's own communicator, one
    /// `MPI_Comm_dup` (under the watchdog, with this communicator's timeout and context), which
    /// inherits the timeout and the node rank and size (no second node split). Every library
    /// object that keeps a communicator makes it this way. @throws MpiError.
    Communicator duplicate() const;

    /// Collective: frees the communicator. Safe to call twice.
    void free() noexcept;

    MPI_Comm get() const noexcept { return comm_; }
    int rank() const noexcept { return rank_; }
    int size() const noexcept { return size_; }
    /// Rank among the processes that share this node's memory.
    int node_rank() const noexcept { return node_rank_; }
    /// Number of processes on this node.
    int node_size() const noexcept { return node_size_; }

    /// Not collective: deadline of every later collective on this communicator; zero turns the
    /// watchdog off. Must be equal on every rank (the loader checks it). Values above
    /// `kMaxTimeout` are treated as `kMaxTimeout` (option structs refuse them earlier, see
    /// `check_timeout`).
    void set_timeout(std::chrono::seconds timeout) noexcept;
    std::chrono::seconds timeout() const noexcept;
    /// Not collective: what this rank does from now on, for the watchdog's report.
    void set_context(CollectiveContext context) const;
    const CollectiveContext& context() const noexcept;
    /// Not collective: replaces "print the report and `MPI_Abort`" on expiry by a call of
    /// `handler(report)` on every waiting rank, after which the collective is awaited without a
    /// deadline (for embedding applications that abort their own way, and for tests). An empty
    /// handler restores the abort.
    void set_expiry_handler(std::function<void(const std::string& report)> handler);
    /// Time this rank spent inside collectives of this communicator waiting for the others.
    std::chrono::duration<double> collective_wait() const noexcept;

    /// Collective barrier. @throws MpiError.
    void barrier() const;
    /// Collective sum of one value. @throws MpiError.
    std::uint64_t allreduce_sum(std::uint64_t value) const;
    /// Collective maximum of one value. @throws MpiError.
    std::uint64_t allreduce_max(std::uint64_t value) const;
    /// Collective minimum of one value. @throws MpiError.
    std::uint64_t allreduce_min(std::uint64_t value) const;
    /// Collective exclusive prefix sum (rank 0 gets 0). @throws MpiError.
    std::uint64_t exscan_sum(std::uint64_t value) const;
    /// Collective element-wise minimum of `values` (the same count on every rank), in one
    /// allreduce. @throws MpiError.
    std::vector<std::uint64_t> allreduce_min(const std::vector<std::uint64_t>& values) const;
    /// Collective element-wise sum modulo 2^64 of `values` (the same count on every rank), in
    /// one allreduce. @throws MpiError.
    std::vector<std::uint64_t> allreduce_sum(const std::vector<std::uint64_t>& values) const;
    /// Collective gather of one value from every rank, on every rank. @throws MpiError.
    std::vector<std::uint64_t> allgather(std::uint64_t value) const;
    /// Collective gather of `values` (the same count on every rank), rank-major, on every rank.
    /// @throws MpiError.
    std::vector<std::uint64_t> allgather(const std::vector<std::uint64_t>& values) const;
    /// Collective element-wise exclusive prefix sums of `values` (the same count on every
    /// rank; rank 0 gets zeros). @throws MpiError.
    std::vector<std::uint64_t> exscan_sum(const std::vector<std::uint64_t>& values) const;
    /// Collective gather of a different number of elements from every rank, concatenated in
    /// rank order, on every rank. `T` is trivially copyable; elements travel as raw bytes (same
    /// layout on every rank). More than 2^31 − 1 elements in all is a ConfigError on every rank.
    /// @throws MpiError, ConfigError.
    template <class T>
    std::vector<T> allgatherv(const std::vector<T>& values) const {
        static_assert(std::is_trivially_copyable_v<T>, "allgatherv moves raw bytes");
        std::vector<T> out;
        gatherv_bytes(values.data(), values.size(), sizeof(T), -1, [&](std::uint64_t total) {
            out.resize(total);
            return static_cast<void*>(out.data());
        });
        return out;
    }
    /// Collective gather like `allgatherv`, but only `root` receives the concatenation (the
    /// other ranks get an empty vector). @throws MpiError, ConfigError.
    template <class T>
    std::vector<T> gatherv(const std::vector<T>& values, int root) const {
        static_assert(std::is_trivially_copyable_v<T>, "gatherv moves raw bytes");
        std::vector<T> out;
        gatherv_bytes(values.data(), values.size(), sizeof(T), root, [&](std::uint64_t total) {
            out.resize(total);
            return static_cast<void*>(out.data());
        });
        return out;
    }
    /// Collective broadcast of a string from `root`. @throws MpiError.
    std::string broadcast(const std::string& value, int root) const;
    /// Collective broadcast of `root`'s `values`; the count must be the same on every rank.
    /// @throws MpiError.
    std::vector<std::uint64_t> broadcast(const std::vector<std::uint64_t>& values, int root) const;
    /// Collective personalised exchange: sends `to_each[r]` (one entry per rank) to rank r and
    /// returns what every rank sent here, indexed by source rank. Sizes travel first; a message
    /// of 2 GiB or more to any rank is a ConfigError on every rank. @throws MpiError, ConfigError.
    std::vector<std::string> alltoallv(const std::vector<std::string>& to_each) const;
    /// The same exchange over packed buffers, for callers that exchange every step: this rank's
    /// message to rank r is bytes [send_offsets[r], send_offsets[r + 1]) of `send` (W + 1
    /// ascending offsets, the last `send.size()`). On return `recv` holds what every rank sent
    /// here, rank r's message at [recv_offsets[r], recv_offsets[r + 1]). `recv` and
    /// `recv_offsets` are overwritten (only on success) and `recv` keeps its capacity, so a
    /// reused buffer costs no allocation and no fresh pages. Collective. @throws MpiError,
    /// ConfigError on every rank (a rank's offsets that do not describe its `send`, or 2 GiB or
    /// more on any rank).
    void alltoallv(const std::string& send, const std::vector<std::uint64_t>& send_offsets,
                   std::string& recv, std::vector<std::uint64_t>& recv_offsets) const;

private:
    friend class detail::PendingAllreduce;  // starts and waits under this watchdog
    /// Starts a non-blocking collective with `start` and waits for it under the watchdog.
    void watched(const char* call, const std::function<int(MPI_Request*)>& start) const;
    void wait_watched(MPI_Request& request, const char* call) const;
    /// `allgatherv` (root < 0) or `gatherv` of `count` elements of `element_bytes` each:
    /// allgathers the counts, checks the total, calls `receive(total)` for the receive buffer
    /// (on the ranks that receive), then gathers under the watchdog.
    void gatherv_bytes(const void* send, std::uint64_t count, std::size_t element_bytes, int root,
                       const std::function<void*(std::uint64_t total)>& receive) const;

    std::unique_ptr<detail::WatchState> watch_;
    Communicator() = default;  // for duplicate()

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    int node_rank_ = 0;
    int node_size_ = 1;
};

}  // namespace mpistage
