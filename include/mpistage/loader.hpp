#pragma once
/// @file
/// The public entry point: `Loader(comm, source, options)`, `loader.epoch(e)` iterates batches.
/// One loader reads files (a `Source`, samples by id, planned before each epoch) or streams (a
/// `StreamSource`: items of unknown count, planned window by window as the ranks read them).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/batch.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/device.hpp"
#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "mpistage/state.hpp"
#include "mpistage/stop.hpp"
#include "mpistage/stream.hpp"
#include "mpistage/stream_source.hpp"
#include "mpistage/tier.hpp"

namespace mpistage {

namespace detail {
class StreamEngine;
}

/// Largest accepted `LoaderOptions::pipeline.prefetch`.
constexpr std::size_t kMaxPrefetch = 4096;
/// Largest accepted `LoaderOptions::pipeline.io_threads`.
constexpr std::size_t kMaxIoThreads = 256;

/// Whether a loader reads global shuffles in two phases (option
/// `LoaderOptions::pipeline.two_phase`, CLI
/// `--two-phase`; docs/architecture.md, "Two-phase reads").
enum class TwoPhase : std::uint8_t {
    /// Every rank reads its own batches (the plain path, on the I/O threads).
    off,
    /// Two-phase reads (slab reads + one exchange per step); needs global sharding, stage
    /// none and fixed batches (otherwise a ConfigError).
    on,
    /// `on` only where a cost model measured at construction, then 2 real steps read both
    /// ways, give a two-phase step of at most 0.8 × the plain step (`two_phase_note` says
    /// why), else `off`; `off` unmeasured outside global sharding, staged, budget, no steps.
    automatic,
};
/// "off", "on" or "auto".
std::string to_string(TwoPhase t);
/// Parses "off", "on" or "auto". @throws ConfigError naming the accepted words.
TwoPhase parse_two_phase(const std::string& s);

/// How batches are read ahead: the ring, the I/O threads, two-phase reads. `prefetch` and
/// `io_threads` may differ between ranks; `two_phase` must be equal on every rank. Part of
/// `LoaderOptions` (`LoaderOptions::pipeline`).
struct PipelineOptions {
    /// Batches read ahead of the consumer: the ring has this many host buffers (at most one per
    /// batch of an epoch), allocated once with their pages mapped. 1 ≤ prefetch ≤ kMaxPrefetch.
    /// Resident batch memory is prefetch × batch bytes; a ring larger than half of the node's
    /// memory per rank is a ConfigError. Also how far a rank may run ahead of a descheduled peer
    /// (the window agreement's lag is ⌊min over ranks / 2⌋ steps): raise it where cores are shared.
    std::size_t prefetch = 2;
    /// Background I/O threads filling the ring (at most kMaxIoThreads; no more are started than
    /// an epoch has batches). 0 reads on the consumer thread inside `next()`. Streams: stream
    /// i of the rank is read ahead by thread i mod T (at most one thread per stream the rank
    /// reads), `prefetch` batches' worth of items (at most `stream.window_bytes`) beyond the
    /// window, so a stream's readers must tolerate being called from a thread other than the
    /// one that opened them (one at a time per reader); 0 reads them inside `next()` (a reader
    /// that must stay on its thread, e.g. a Python `sqlite3` connection). The items, their
    /// order, the batches and the step at which a read error is thrown are the same for every
    /// value.
    /// Sources whose reads call MPI (`Source::reads_use_mpi`) run with 0 threads unless MPI
    /// provides MPI_THREAD_MULTIPLE. A memory tier (`stage`) within one node copies batches of
    /// up to 1 MiB on the consumer thread whatever this says (plain loads: a thread hand-over
    /// costs more than the copy); across nodes the threads fetch remote samples ahead. A thread
    /// the system refuses is not an error: fewer (or none) read the same batches; said once.
    std::size_t io_threads = 1;
    /// Two-phase reads (docs/architecture.md, "Two-phase reads"), for global shuffles of data
    /// that is not staged: rank r reads only the samples of each step that lie in its
    /// contiguous, byte-balanced slab of the dataset (sorted by id, so the reads are
    /// coalesced), and one `MPI_Alltoallv` per step delivers every sample to the rank whose
    /// batch holds it. The reads and the exchange run on the consumer thread inside `next()`
    /// (`io_threads` is not used), as the exchange is collective. `on` needs `global` sharding,
    /// `stage == none` and fixed batches (otherwise a ConfigError); `automatic` decides once,
    /// collectively, at construction from measured costs (see `TwoPhase`; the decision is
    /// the same on every rank and is in `LoaderStats::two_phase`). Must be equal on every rank.
    TwoPhase two_phase = TwoPhase::off;
};

/// Where batches are delivered (the CPU or a CUDA device) and how the copies to a device are
/// ordered. `device` is agreed across ranks; `cuda_stream` may differ per rank. Part of
/// `LoaderOptions` (`LoaderOptions::delivery`).
struct DeliveryOptions {
    /// Where batches are delivered (docs/gpu.md, "Choosing the device"): "auto" (a CUDA device,
    /// else the CPU), "cpu", "cuda" (a device is required) or "cuda:N" (always that device).
    /// Without an index the device is the constructing thread's current device when it has a
    /// current context (the trainer chose it), else the rank's node-local rank in the whole job
    /// (the launcher's local rank, `launcher_local_rank`; without one, the node rank on this
    /// loader's communicator) mod the visible devices. The resolved
    /// kind is agreed at construction: CUDA on every rank, or the CPU on every rank (when a
    /// rank has no usable device and every rank resolving to CUDA asked `auto`; one line for
    /// the whole job, from rank 0), else the same ConfigError on every rank. With CUDA,
    /// `epoch(e)` yields batches whose fields are on the device (HostBatch::device()). The
    /// loader never changes the caller's current CUDA device or context.
    std::string device = "auto";
    /// Print the device lines (stderr, rank 0 of the loader's communicator: one line for the
    /// job, once per process each): that `auto` found no usable CUDA device and stages on the
    /// CPU, and that ranks of one node stage to one GPU that none of them asked for. False
    /// silences them (CLI `--quiet`); rank 0's value decides.
    bool log_device_fallback = true;
    /// Allocate the ring with `cudaHostAlloc` (pinned, once) when the device is a CUDA device.
    bool pin_memory = true;
    /// Host → device copies return before the copy completes, so it overlaps the consumer's
    /// work (the consumer's stream waits on the copy's event); false makes the loader wait
    /// (host) for each window's copies.
    bool non_blocking = true;
    /// With a CUDA device: the stream the trainer's kernels read batches on (a `cudaStream_t`;
    /// nullptr, the default, is the legacy default stream). Each batch's copy is ordered
    /// before the work queued on it after `next()` returned the batch (cudaStreamWaitEvent;
    /// the host does not wait), and a device block is reused only after the work queued on it
    /// when the batch was dropped. Not owned; must outlive the loader. May differ per rank.
    void* cuda_stream = nullptr;
};

/// The memory tier (docs/architecture.md, "Memory tier"): whether and how the data is staged
/// into node memory at construction. Every field must be equal on every rank. Part of
/// `LoaderOptions` (`LoaderOptions::tier`).
struct TierOptions {
    /// The staging tier (docs/architecture.md, "Memory tier"). With `memory`, construction is
    /// where the data is read: rank r reads its shard `[begin[r], begin[r+1])`
    /// (`balanced_shard_begins`) once with large contiguous reads (collective H5Dread /
    /// MPI_File_read_at_all for HDF5, coalesced runs of at most 1 GiB per call otherwise;
    /// TFRecord/Example fields are decoded once, ragged fields as values + offsets) into an MPI-3
    /// shared-memory window of its node (`MPI_Win_allocate_shared`), or maps the files' pages
    /// and locks them in memory where they can be (`stage_read`). Every epoch (any shuffle)
    /// then copies samples from memory: plain loads from ranks of the same node, `MPI_Get`
    /// under a passive-target `MPI_Win_lock_all` epoch from other nodes. Resident memory per
    /// rank: its staged shard + the ring. Must be equal on every rank.
    Stage stage = Stage::none;
    /// Bytes one rank may use for its staged shard plus its ring. 0 = half of the node's
    /// physical memory divided among the node's ranks. Over budget, `memory` is a ConfigError
    /// (naming the bytes) and `automatic` serves from the file. Must be equal on every rank.
    std::uint64_t stage_budget_bytes = 0;
    /// Testing: treat each group of this many consecutive ranks as one node, so the cross-node
    /// (`MPI_Get`) path of the memory tier runs on one machine. 0 = the real nodes
    /// (`MPI_Comm_split_type`). Must be equal on every rank.
    int stage_ranks_per_node = 0;
    /// How the staged shard is taken in (`StageRead`): mapped from the files' pages or copied
    /// into a shared-memory window. `map` or `copy` with `stage == none` is a ConfigError.
    /// Must be equal on every rank.
    StageRead stage_read = StageRead::automatic;
};

/// The watchdog, the checks of the files at construction and what `restore` accepts. Every
/// field must be equal on every rank. Part of `LoaderOptions` (`LoaderOptions::safety`).
struct SafetyOptions {
    /// Watchdog deadline of every collective the loader makes on its own communicator: when
    /// the other ranks do not arrive within this time, the job is aborted (`MPI_Abort`) with a
    /// message naming the ranks that did not arrive and what each rank was doing. Must be equal
    /// on every rank; zero disables the watchdog. (Issue "Collective safety".)
    std::chrono::seconds timeout{300};
    /// At construction, every rank hashes every sample of its own shard and of its
    /// neighbour's (rank + 1 mod W) and the ranks compare, so a file that differs anywhere
    /// between ranks is a ConfigError (reads about twice the dataset in all). Without it only
    /// the first and last sample of every shard are compared (each read by two ranks).
    /// Must be equal on every rank.
    bool verify_files = false;
    /// How much of the dataset the state's fingerprint covers (docs/resume.md, "Fingerprint
    /// levels"; `FingerprintLevel` says what each level catches and misses): `sampled`
    /// (default: metadata plus the bytes and sizes of 1024 spread samples and samples 0 and
    /// N−1; at most 1026 reads in all, whatever N is, so it misses an edit of a sample it
    /// does not read) or `full` (also every sample's size and bytes, hashed in parallel:
    /// reads the dataset once at construction, O(N/W) per rank, with progress lines from rank
    /// 0 and under the watchdog). Computed collectively at construction, stored by `state()`;
    /// `restore` recomputes it at the level of the state it is given (`sampled_v4` for a
    /// `sampled` state of format version 3 or 4: O(N/W) size look-ups per rank). Must be equal
    /// on every rank.
    FingerprintLevel fingerprint = FingerprintLevel::sampled;
    /// `restore` takes a state without a consumed-id digest (format versions 1 to 3, or one
    /// whose `consumed_digest` was removed) only when this is true: such a state's keys can
    /// be edited consistently (epoch, steps with samples) and nothing would tell. False (the
    /// default): `restore` refuses it with a ConfigError naming this option (Python
    /// `accept_legacy_state`, CLI `--accept-legacy-state`). Must be equal on every rank.
    bool accept_legacy_state = false;
};

/// Options of a loader, grouped by role: the plan (`plan`, and `stream` for a StreamSource),
/// the read-ahead pipeline, the delivery to a device, the memory tier and the safety checks.
/// Fields of `plan` must be equal on every rank (checked collectively); `pipeline.prefetch`,
/// `pipeline.io_threads` and `delivery.cuda_stream` may differ between ranks.
///
/// A loader over streams uses `plan.batch_size` (the largest batch with a budget: then
/// `plan.budget.max_batch_samples`), `plan.budget` (`batch_bytes`, `batch_tokens`,
/// `token_field`), `stream`, `pipeline.prefetch`, `pipeline.io_threads`, `safety.timeout` and
/// `delivery` (`device`, `log_device_fallback`, `cuda_stream`: each batch is copied to the
/// device by the loader's stager, from pageable memory through its pinned bounce blocks;
/// `pin_memory` and `non_blocking` have no ring to act on); any other option set away from its
/// default (a shuffle, global sharding, a seed, `balance_steps`, `bucket_window`, a memory
/// tier, two-phase reads, `verify_files`, a `full` fingerprint) is a ConfigError naming it. A
/// loader over files refuses `stream` set away from its defaults likewise.
struct LoaderOptions {
    /// Batch size or batch budget, seed, sharding, shuffle and remainder policy
    /// (docs/architecture.md, plan). With a budget (`plan.budget`) batches vary in size: the
    /// ring's slots hold the largest batch of an epoch's plan (of any rank; reallocated, with
    /// the same memory check, when a later epoch has a larger one), and every other part of
    /// the loader (prefetch, I/O threads, memory tier, device, agreement, state and restore)
    /// is the same.
    PlanOptions plan;
    /// Streams only: how the ranks share the streams' items (sharding, chunks, what dry ranks
    /// get, the window of steps per agreement).
    StreamPlanOptions stream;
    /// Read-ahead: the ring's depth, the I/O threads, two-phase reads.
    PipelineOptions pipeline;
    /// The device batches are delivered to, pinning, the consumer's CUDA stream.
    DeliveryOptions delivery;
    /// The memory tier (staging the data into node memory at construction).
    TierOptions tier;
    /// The watchdog's deadline, file verification, the fingerprint level, legacy states.
    SafetyOptions safety;

    void validate() const;
};

/// Counters of a loader over streams (zero for files), this rank's.
struct StreamCounters {
    /// With a token budget: tokens of the valid samples, and the padding a trainer padding each
    /// batch to its longest sample would add (padding waste = padding / (tokens + padding)).
    std::uint64_t tokens = 0;
    std::uint64_t padding_tokens = 0;
    /// Items this rank read from its streams (including items forwarded to others).
    std::uint64_t items_read = 0;
    /// Items this rank sent to another rank (`hash` routing and `rebalance`).
    std::uint64_t items_sent = 0;
    /// Rounds of agreement beyond one per window (reading more for dry ranks or for routing).
    std::uint64_t extra_rounds = 0;
    /// Agreements (one allgather each) this rank took part in, extra rounds included; with
    /// `window_steps` > 1 usually far fewer than the steps.
    std::uint64_t agreements = 0;
    /// I/O threads that read the current pass ahead (`LoaderOptions::pipeline.io_threads`, at most
    /// one per stream this rank reads; 0: read on the consumer thread).
    std::size_t io_threads = 0;
};

/// Counters of one rank, accumulated over all epochs since construction.
struct LoaderStats {
    /// Batches returned (with a batch budget, padding batches included).
    std::uint64_t batches = 0;
    std::uint64_t valid_samples = 0;
    /// Slots with valid = 0 (with a batch budget: the masked padding batches, one slot each).
    std::uint64_t padding_slots = 0;
    /// Budget batches of one sample over the budget.
    std::uint64_t oversize_batches = 0;
    /// Bytes read from the source (payload bytes of all fields; streams: of the valid samples
    /// of this rank's batches).
    std::uint64_t bytes_read = 0;
    /// Time the consumer spent waiting inside `next()` for data and agreement
    /// (= wait_io_time + wait_peers_time + bookkeeping).
    std::chrono::duration<double> wait_time{0};
    /// Part of `wait_time` spent waiting for this rank's own reads (the ring was empty).
    std::chrono::duration<double> wait_io_time{0};
    /// Part of `wait_time` spent in collectives waiting for other ranks: a large value on
    /// every rank but one points at that one rank as the laggard.
    std::chrono::duration<double> wait_peers_time{0};
    /// Time from the first `next()` of an epoch to its end, summed over epochs.
    std::chrono::duration<double> epoch_time{0};
    /// Samples the byte-range cut gave this rank before the skew correction.
    std::uint64_t records_in_cut = 0;
    /// Records whose descriptors the skew correction moved to or from this rank.
    std::uint64_t records_moved = 0;
    /// True when the ring was allocated with cudaHostAlloc.
    bool pinned = false;
    /// The device chosen from `LoaderOptions::delivery.device` on this rank (agreed: CUDA on every
    /// rank or on none).
    DeviceChoice device;
    /// Host → device copies of the batches (CUDA only): bytes and device time of the copies
    /// that completed so far.
    StagingStats staging;
    /// The tier serving this loader's epochs: "memory" or "file" (same on every rank).
    std::string tier = "file";
    /// Why `tier` is what it is when `stage` was `automatic` (e.g. over budget), else empty.
    std::string tier_note;
    /// Bytes this rank holds in the memory tier (its shard, all fields), 0 when not staged.
    std::uint64_t staged_bytes = 0;
    /// Wall time of the staging read (construction), 0 when not staged.
    std::chrono::duration<double> stage_time{0};
    /// Part of `stage_time` spent mapping this rank's own pages of the tier before the read:
    /// for writing, one MADV_POPULATE_WRITE instead of a page fault per page ("independent",
    /// "collective"), or the `mmap` of the files ("mapped").
    std::chrono::duration<double> stage_populate_time{0};
    /// Part of `stage_time` spent reading the shard from the files into the tier (the raw
    /// read: `staged_bytes / stage_read_time` is its bandwidth; "mapped": reading the pages
    /// in and locking them, MADV_POPULATE_READ + mlock).
    std::chrono::duration<double> stage_read_time{0};
    /// Part of `stage_time` spent mapping every segment of the node for reading (one
    /// MADV_POPULATE_READ; global sharding only). The touch pass that follows (a thread
    /// loading one byte per page, from the first epoch on) is not counted.
    std::chrono::duration<double> stage_map_node_time{0};
    /// How the shard was taken in: "mapped" (the files' pages mapped, read in and locked:
    /// `StageRead::map`), "independent" (large preads of the rank's contiguous byte range
    /// into the window) or "collective" (MPI-IO collective reads into the window); empty when
    /// not staged. The same on every rank.
    std::string stage_read_method;
    /// Why the shard was copied although `stage_read` was `automatic` (a field that cannot be
    /// mapped, several nodes, the lock refused), else empty. The same on every rank.
    std::string stage_read_note;
    /// Whether the epochs read in two phases (`two_phase` `on`, or `automatic` where chosen),
    /// and with `automatic` why (measured costs and both predictions, or why nothing was
    /// measured) and the predicted step seconds of the plain path and of two-phase reads (0
    /// when not measured). The same on every rank.
    bool two_phase = false;
    std::string two_phase_note;
    /// `Shuffle::chunks`: its chunk and window sizes and where they came from, and whether
    /// stage auto chose it over the global shuffle (the data exceeding the budget); else
    /// empty. The same on every rank.
    std::string shuffle_note;
    double two_phase_plain_step_seconds = 0;
    double two_phase_step_seconds = 0;
    /// Streams only: reading, routing and agreement counters.
    StreamCounters stream;
    /// Files with `Shuffle::chunks`: the chunk read-ahead's counters.
    ReadAheadCounters read_ahead;
};

class Loader;

/// Options of one epoch (`Loader::epoch(e, options)`). Must be equal on every rank (checked
/// when the epoch starts: a difference is the same ConfigError on every rank).
struct EpochOptions {
    /// Batches the range yields at most (0: the whole epoch, or the rest of a resumed one): the
    /// collective early end at a step fixed in advance (a trainer's step budget). The range
    /// ends there on every rank; `Loader::state()` points at that step; `epoch(e + 1)` is whole.
    std::uint64_t max_steps = 0;
};

/// The batches of one epoch, in plan order. Single consumer; obtained from `Loader::epoch`; must
/// not outlive its loader (batches and tensors may: they own their ring slot; a range whose
/// loader is gone stops its reads and throws from `next()`).
/// Every rank must consume the epoch to the same step (`next()` takes part in the agreement);
/// to end it early use `EpochOptions::max_steps` or `request_stop()` (agreed; stop.hpp). A range
/// left at different steps on different ranks (a `break` at each rank's own step) is detected
/// at the next loader collective of any rank (`next()`, `epoch()`, `close()`, the destructor):
/// each throws the same ConfigError naming every rank's call and step (the destructor prints
/// it), never a crash or a hang. A `break` at the same step on every rank is fine.
class EpochRange {
public:
    EpochRange(EpochRange&&) noexcept;
    EpochRange& operator=(EpochRange&&) noexcept;
    ~EpochRange();

    /// Batches per rank in this range, equal on every rank, decided before the first batch
    /// (the epoch's steps, or `EpochOptions::max_steps` when that is fewer; an agreed stop may
    /// end the range earlier). Streams: `max_steps`, or 0 when none was given (the count is
    /// unknown until every rank's streams end).
    std::uint64_t steps() const noexcept;
    /// Not collective: batches this range has returned so far (equal on every rank between
    /// steps).
    std::uint64_t steps_done() const noexcept;
    /// Not collective: true when the batch most recently returned is a single sample larger
    /// than the byte or token budget (a budget batch of its own); false before the first.
    bool last_oversize() const noexcept;
    /// Not collective, thread-safe, async-signal-safe: `mpistage::request_stop()` for this range
    /// only (agreed at the next window: `next()` returns false at the same step everywhere). A
    /// rank at its own last step asks for it, then calls `next()` until it returns false.
    void request_stop() noexcept;
    /// True once an agreed stop ended the range (early, or at its end); `state()` is there.
    bool stopped() const noexcept;
    /// This rank's plan for the epoch (of a resumed epoch: its remaining part; streams: an
    /// empty plan, the steps being decided window by window). Fixed batches
    /// are computed per slot (`EpochPlan::on_demand()`: `ids`/`valid` are empty, read
    /// `slot_id`/`slot_valid`), so the plan's memory does not grow with N.
    const EpochPlan& plan() const noexcept;
    /// Totals over all ranks of this range (of a resumed epoch: its remaining part only;
    /// streams: zero, unknown in advance).
    const EpochTotals& totals() const noexcept;
    /// Collective: the next batch, or false after the last one. An error on any rank (I/O,
    /// format, all ring slots held by the caller) is thrown on every rank at the same step.
    /// Window requests (non-blocking allreduces completed L steps after they start;
    /// docs/architecture.md, "Agreement that does not wait on scheduling") say which batches
    /// every rank holds, so a call waits for a peer only when it is L steps behind: L =
    /// ⌊prefetch/2⌋ from files; from the memory tier the steps of 50 ms (a step failing from
    /// the tier and the file is thrown up to L steps later). Streams: the ranks agree once per
    /// window of steps (`StreamPlanOptions::window_steps`) whether anyone still holds items,
    /// failed, is short or asked to stop, so a stream running dry first ends every rank at the
    /// same step; an error in any rank's stream is thrown on every rank (again on later
    /// calls). Every rank calls it equally often.
    /// @throws Error subclasses, identical on every rank.
    bool next(HostBatch& out);

    /// Input iterator over the batches (each increment calls `next`).
    class iterator {
    public:
        using value_type = HostBatch;
        iterator() = default;
        explicit iterator(EpochRange* r) : range_(r) { ++*this; }
        const HostBatch& operator*() const { return batch_; }
        const HostBatch* operator->() const { return &batch_; }
        iterator& operator++() {
            if (range_ && !range_->next(batch_)) range_ = nullptr;
            return *this;
        }
        bool operator!=(const iterator& o) const { return range_ != o.range_; }
        bool operator==(const iterator& o) const { return range_ == o.range_; }

    private:
        EpochRange* range_ = nullptr;
        HostBatch batch_;
    };
    iterator begin() { return iterator(this); }
    iterator end() { return iterator(); }

private:
    friend class Loader;
    struct Impl;
    explicit EpochRange(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

/// Stages the samples of a source (files) or the items of a stream source across the ranks of a
/// communicator: one loader, one epoch range, one state, whichever it reads.
///
/// Which calls are collective, for both inputs: the constructors and `restore`, `epoch()`,
/// every `EpochRange::next()` (each increment of its iterator) and `close()`. `state()` and
/// every accessor are local (no communication), so rank 0 alone may save the state while the
/// other ranks go on.
///
/// Construction is collective: it duplicates `comm` (and gives the copy the watchdog deadline
/// `LoaderOptions::safety.timeout`), validates options, compares the plan options, N and the
/// dataset's metadata across ranks, compares the contents of the first and last sample of every
/// shard (each read by its owner and by the rank before it; whole shards with `verify_files`), and
/// computes the byte-range cut and skew correction (`MPI_Allreduce`/`MPI_Exscan`), stages the
/// dataset into node memory when `LoaderOptions::tier.stage` asks for it (collective reads, window
/// allocation: see there), so ranks
/// whose options or files differ all throw the same `ConfigError` instead of hanging or mixing
/// data. Every collective of the loader is watched: a rank that does not arrive within
/// `timeout` ends the job with a message naming it (see `Communicator`). The source must outlive
/// the loader. Not thread-safe: one thread drives a loader.
class Loader {
public:
    /// Collective over `comm` (a `Communicator` or a plain `MPI_Comm`, see `CommRef`), which is
    /// borrowed for this call only: the loader keeps its own `MPI_Comm_dup`, the one duplicate it
    /// makes (freed when the loader is destroyed, while MPI is still initialised), so `comm` may
    /// be destroyed after construction. Every public constructor of the library takes the
    /// communicator this way. The node split (`Communicator::split_node`) is made, once, only
    /// when the loader needs the node: a memory tier (`stage`), token-budget batches, a prefetch
    /// ring above its share of the node's memory among all ranks, or the device fallback to the
    /// node rank; inherited when `comm` is a `Communicator` that made it. @throws ConfigError
    /// (invalid or differing options, N = 0, a launcher mismatch, see `Communicator`), MpiError;
    /// identical on every rank.
    Loader(CommRef comm, const Source& source, LoaderOptions options);
    /// Collective over `comm` (borrowed, as above): a loader over the sub-streams of `source`.
    /// Checks the options (see `LoaderOptions`: file-only options are refused by name), the
    /// fields and the stream count across ranks and opens this rank's streams. Every rank
    /// yields the same number of steps per epoch, every item is yielded by exactly one rank,
    /// item ids (`HostBatch::index`) are `stream_item_id(stream, position)`. The source must
    /// outlive the loader. @throws ConfigError, any error of the source's `open`, MpiError;
    /// identical on every rank.
    Loader(CommRef comm, const StreamSource& source, LoaderOptions options);
    ~Loader();
    Loader(const Loader&) = delete;
    Loader& operator=(const Loader&) = delete;
    /// Moves the loader (no epoch may be in flight).
    Loader(Loader&&) noexcept;
    Loader& operator=(Loader&&) noexcept;

    /// Collective: a loader that continues where `state` (from `state()` of an earlier run,
    /// possibly at another world size) left off. It is constructed as by the constructor, then
    /// the first `epoch(state.epoch)` yields only the remaining batches:
    /// - the same world size: exactly the uninterrupted run's remaining batches (same ids,
    ///   same bytes, same step numbers);
    /// - another world size (`global` sharding only): exactly the samples at epoch positions
    ///   ≥ `state.samples_consumed`, each once, in equal batch counts on every rank.
    /// Later epochs are whole. `options.plan` must match the state's seed, sharding, shuffle,
    /// remainder and batch budget (and batch size with `byte_range`); `balance_steps` may
    /// differ. With a batch budget and `global` sharding "positions" are those of the batch
    /// order (docs/resume.md, "Budget batches"): the resumed job gets exactly the batches the
    /// saved one did not consume, dealt in turn from rank 0.
    /// The dataset is compared at the state's `fingerprint_level` (recomputed collectively
    /// when it differs from `options.fingerprint`: for a state of an older format version at
    /// `ends` or `sampled_v4`, or a `full` state restored with `sampled` or the reverse), and
    /// the state's numbers are checked
    /// against each other and its options (docs/resume.md, "Validation").
    /// @throws ConfigError, identical on every rank, when the state differs between ranks, is
    ///         of another format version, holds a value out of range or numbers that
    ///         contradict each other (e.g. samples_consumed not following from
    ///         steps_consumed, world_size and batch_size, or no step left in the epoch), is
    ///         of another dataset (fingerprint, N or skipped records), has an incompatible
    ///         option, is a `byte_range` state at another world size, or (budget) does not end
    ///         at a batch; and as the constructor.
    static Loader restore(CommRef comm, const Source& source, LoaderOptions options,
                          const LoaderState& state);
    /// Collective: a stream loader that continues where `state` (a stream state from `state()`,
    /// any world size) left off: the first `epoch(state.epoch)` yields exactly the items not
    /// yet yielded in that pass (the state's pending ranges and everything after its
    /// positions); later epochs are whole passes. The state's fingerprint must match the
    /// source and the ownership options (sharding, chunk size, hash reading); batching may
    /// differ. @throws ConfigError, identical on every rank, for a file state, another source
    /// or sharding, another stream count, a source whose order is not stable (its positions
    /// would not name the same items again), or a state that differs between ranks; and as
    /// the constructor.
    static Loader restore(CommRef comm, const StreamSource& source, LoaderOptions options,
                          const LoaderState& state);

    /// Not collective, no I/O, identical on every rank: where the job stands. Counts the
    /// batches `next()` has returned (save after the training step that used the last one);
    /// batches prefetched but not returned are not consumed. A state taken when an epoch has
    /// been consumed to its end points at the start of the next epoch. Streams: every rank
    /// knows what every rank yields at each step (after each agreement the ranks announce the
    /// item ids of the agreed steps, one allgatherv), so the state is the same on every rank;
    /// O(pending ranges) time. @throws ConfigError after ranks were found in different loader
    /// calls, until an epoch starts.
    LoaderState state() const;

    /// Collective: starts epoch `e` (the epoch is an argument, never hidden state) and returns
    /// its batches. Only one epoch may be in flight per loader. After `restore`, the first call
    /// with `e == state.epoch` yields the rest of that epoch; every other call a whole epoch
    /// (also after an early end); for streams a whole epoch is one pass over every stream from
    /// its first item (every rank reopens its streams). `options` must be equal on every rank.
    /// @throws ConfigError,
    /// the same everywhere, when ranks ask for different epochs or options, left the last epoch
    /// at different steps, or are in another loader call (EpochRange), naming calls and steps.
    EpochRange epoch(std::uint64_t e, EpochOptions options = {});

    /// Collective, idempotent: checks that every rank left its last epoch at the same step;
    /// later `epoch()` calls throw. The destructor does the same but prints a mismatch on
    /// stderr; `close()` throws it.
    /// @throws ConfigError, identical on every rank, as `epoch()`.
    void close();

    /// Global number of samples N (streams: 0, unknown).
    std::uint64_t num_samples() const noexcept;
    /// Totals over all ranks of one epoch (identical for every epoch with fixed batches; with
    /// a batch budget those of epoch 0, and each epoch's own are `EpochRange::totals`).
    const EpochTotals& totals() const noexcept;
    /// This rank's counters.
    const LoaderStats& stats() const noexcept;
    const LoaderOptions& options() const noexcept;
    /// Not collective; the consumer's thread, between `next()` calls: the stream (a
    /// `cudaStream_t`; nullptr: the legacy default stream) that the batches `next()` hands over
    /// from now on are ordered on, replacing `delivery.cuda_stream` (`options()` shows it). The
    /// Python module calls it at every `next()` with torch's current stream. Each batch's
    /// device block is fenced on the stream it was handed over on, so a later change never
    /// frees a block under an earlier stream's kernels. No-op on the CPU.
    void set_cuda_stream(void* cuda_stream) noexcept;
    const Communicator& comm() const noexcept;
    /// What the loader reads.
    LoaderInput input() const noexcept;
    /// The source of a loader over files. @throws ConfigError for a loader over streams.
    const Source& source() const;
    /// The stream source of a loader over streams. @throws ConfigError for a loader over files.
    const StreamSource& stream_source() const;

private:
    friend class EpochRange;
    struct Impl;
    explicit Loader(std::unique_ptr<detail::StreamEngine> stream);
    /// `epoch()` of a loader over streams.
    EpochRange stream_epoch(std::uint64_t e, EpochOptions options);
    std::unique_ptr<Impl> impl_;
    /// A loader over streams: the stream planner and its readers (`impl_` is then null).
    std::unique_ptr<detail::StreamEngine> stream_;
};

}  // namespace mpistage
