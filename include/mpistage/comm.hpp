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
struct NodeState;
struct NodeAccess;
class CallComm;
}  // namespace detail

/// The library's own communicator: an `MPI_Comm_dup` of the user's communicator with
/// `MPI_ERRORS_RETURN` set (the user's communicator and its error handler are left as they
/// are), and, once `split_node()` has been called, the node-local communicator from
/// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` (never launcher environment variables, which are
/// wrong under `mpirun` inside `sbatch`).
///
/// Lifetime: every public constructor of the library (sources, `Loader`) takes a `CommRef`: a
/// `Communicator` or a plain `MPI_Comm`, borrowed for the call only; an object that needs a
/// communicator afterwards keeps its own `MPI_Comm_dup`, so the caller's communicator may be
/// destroyed afterwards.
///
/// Which calls are collective: the constructor (one `MPI_Comm_dup`), `duplicate()` (one
/// `MPI_Comm_dup`), `split_node()` until the split is known (one `MPI_Comm_split_type`),
/// `free()` and the collectives below. Nothing else: no conversion, copy or accessor makes an
/// MPI collective.
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
/// Move-only. Freeing is collective in MPI terms; call `free()` on every rank at the same
/// point, the destructor is a no-throw fallback that frees only while MPI is still
/// initialised. Not thread-safe: one thread at a time (a communicator and the ones duplicated
/// from it after its node split share the node communicator: see `split_node()`).
class Communicator {
public:
    /// Collective over `user_comm`: one `MPI_Comm_dup` (no node split: see `split_node()`);
    /// the watchdog deadline starts at `timeout` (`kDefaultCollectiveTimeout` unless given).
    /// `user_comm` is borrowed, never freed, and its error handler is not changed.
    ///
    /// `explicit`: a collective is never hidden in a conversion. The library's constructors
    /// take a `CommRef`, to which a plain `MPI_Comm` converts at no cost
    /// (`Loader loader(MPI_COMM_WORLD, source, options)`: the loader's own duplicate is the one
    /// `MPI_Comm_dup` of that call).
    ///
    /// Launcher check (local, before any collective): when `MPI_COMM_WORLD` has one rank but the
    /// environment says the job has more tasks (`WORLD_SIZE`/`LOCAL_WORLD_SIZE` from torchrun,
    /// `SLURM_STEP_NUM_TASKS`/`SLURM_NTASKS`/`SLURM_NPROCS` without an MPI launcher's count,
    /// `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`, `PMIX_SIZE`, `MV2_COMM_WORLD_SIZE`), the process was
    /// not started by the MPI launcher and would read the whole dataset: a `ConfigError` naming
    /// both counts, the variable and how to launch (`mpirun -n N`, `srun --mpi=pmix -n N`).
    /// `MPISTAGE_ALLOW_SINGLETON=1` in the environment turns the check off (one process
    /// intended). See docs/launching.md. Every `Communicator` built from a plain `MPI_Comm`
    /// makes the check, so the first object of a job (a source or loader given
    /// `MPI_COMM_WORLD`, the CLI, Python) refuses before its first collective.
    /// @throws ConfigError on a launcher mismatch or `MPI_COMM_NULL`; MpiError when MPI is not
    ///         initialised or duplication fails.
    ///
    /// `timeout` is the watchdog deadline of the duplication itself (under a `BlockingWatch`: a
    /// rank that never arrives ends the job with exit code 70 after `timeout`) and of every
    /// later collective (`set_timeout` changes it).
    explicit Communicator(MPI_Comm user_comm,
                          std::chrono::seconds timeout = kDefaultCollectiveTimeout);
    Communicator(Communicator&& other) noexcept;
    Communicator& operator=(Communicator&& other) noexcept;
    Communicator(const Communicator&) = delete;
    Communicator& operator=(const Communicator&) = delete;
    ~Communicator();

    /// Collective over this communicator: the library object's own communicator, one
    /// `MPI_Comm_dup` (under the watchdog, with this communicator's timeout and context), which
    /// inherits the timeout and, when `split_node()` was made before, the node split (no second
    /// split). Every library object that keeps a communicator made from a `Communicator` makes it
    /// this way. @throws MpiError.
    Communicator duplicate() const;

    /// Collective: frees the communicator (and its hold on the node communicator). Safe to call
    /// twice.
    void free() noexcept;

    MPI_Comm get() const noexcept { return comm_; }
    int rank() const noexcept { return rank_; }
    int size() const noexcept { return size_; }

    /// The node split, made once: collective over this communicator the first time (one
    /// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` under a `BlockingWatch` with this
    /// communicator's timeout), local and immediate once the split is known, whether made by
    /// this communicator or inherited from the one it was duplicated from. Call it at the same
    /// point on every rank: whether the split is known is the same on every rank, since it
    /// follows from the same calls. The library calls it only where it needs the node: the
    /// memory tier's and the TFRecord descriptors' node-shared windows, the memory checks
    /// against this node's share (an index-free TFRecord scan, the stage budget, a prefetch
    /// ring or `--verify` bitmap too large for a share among all ranks, token-budget batches),
    /// and the device fallback to the node rank (`LoaderOptions::delivery.device` `auto`/`cuda`
    /// with no launcher local rank and no current device). It keeps the node communicator, on which
    /// those windows are made; duplicates made afterwards share it, so build objects with node
    /// windows from one thread at a time per such family. Const: the split is a cache of a
    /// property of the group. @throws MpiError.
    void split_node() const;
    /// Local: whether the node split is known (`split_node()`).
    bool has_node_split() const noexcept;
    /// Local: rank among the processes of this communicator that share this node's memory.
    /// @throws ConfigError before `split_node()`.
    int node_rank() const;
    /// Local: number of processes of this communicator on this node.
    /// @throws ConfigError before `split_node()`.
    int node_size() const;

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

    friend struct detail::NodeAccess;  // the node communicator, for node-shared windows
    std::unique_ptr<detail::WatchState> watch_;
    Communicator() = default;  // for duplicate()

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
    /// The node split once made (`split_node()`), shared with the duplicates made afterwards;
    /// null before. Mutable: a cache of a property of the group, made by a const call.
    mutable std::shared_ptr<const detail::NodeState> node_;
};

/// A communicator borrowed for one call: what every public constructor of the library takes
/// (sources, `open_source`, `Loader`). A `Communicator` and a plain `MPI_Comm`
/// convert to it implicitly and at no cost: the conversion makes no MPI call, and the
/// launcher check and every collective happen inside the constructor it is passed to, which is
/// collective anyway. Owned versus borrowed is a type: `Communicator` owns, `CommRef` never
/// does; do not keep one past the call (it points at the caller's `Communicator`).
///
/// What the constructor then does with it: an object that needs a communicator after the call
/// keeps its own, one `MPI_Comm_dup`, made by `duplicate()`; an object that needs one only
/// during the call works on the caller's `Communicator` as it is, or, given a plain `MPI_Comm`,
/// on a duplicate of its own (one `MPI_Comm_dup`, freed when the call ends). So each library
/// object makes one `MPI_Comm_dup` at most, and a plain `MPI_Comm`'s duplicate gets the
/// library's `MPI_ERRORS_RETURN` without the caller's communicator being changed.
class CommRef {
public:
    /// Local, no MPI call: borrows `comm` for the call.
    CommRef(const Communicator& comm) noexcept  // NOLINT(google-explicit-constructor): see above
        : comm_(&comm) {}
    /// Local, no MPI call: borrows `comm`; `timeout` is the watchdog deadline of the duplicate
    /// the receiving constructor makes of it (its later collectives follow the object's own
    /// options, e.g. `LoaderOptions::safety.timeout`).
    CommRef(MPI_Comm comm,  // NOLINT(google-explicit-constructor): see above
            std::chrono::seconds timeout = kDefaultCollectiveTimeout) noexcept
        : raw_(comm), timeout_(timeout) {}

    /// The caller's `Communicator`, or null for a plain `MPI_Comm`.
    const Communicator* communicator() const noexcept { return comm_; }
    /// Collective over the borrowed communicator: the receiving object's own communicator,
    /// one `MPI_Comm_dup`: `Communicator::duplicate()` of the caller's `Communicator` (its
    /// timeout and node split inherited), or `Communicator(comm, timeout)` of a plain `MPI_Comm`
    /// (the launcher check first). @throws as those.
    Communicator duplicate() const;

private:
    friend class detail::CallComm;
    const Communicator* comm_ = nullptr;
    /// A duplicate made for this call by a library function (`open_source`) and handed to the
    /// one object it builds, which takes it instead of duplicating again (`detail::CallComm`).
    Communicator* donor_ = nullptr;
    MPI_Comm raw_ = MPI_COMM_NULL;
    std::chrono::seconds timeout_ = kDefaultCollectiveTimeout;
};

}  // namespace mpistage
