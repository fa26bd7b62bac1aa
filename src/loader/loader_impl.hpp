#pragma once
// The private state of Loader and EpochRange, shared by loader.cpp and epoch_range.cpp.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "device/device_choice.hpp"
#include "device/device_stager.hpp"
#include "loader/sync.hpp"
#include "loader/window_agreement.hpp"
#include "mpistage/loader.hpp"
#include "pipeline/prefetch.hpp"
#include "pipeline/ring.hpp"
#include "tier/chunk_read_ahead.hpp"
#include "tier/memory_tier.hpp"

namespace mpistage {

struct Loader::Impl {
    Communicator comm;
    const Source& source;
    LoaderOptions options;
    std::uint64_t num_samples = 0;
    EpochTotals totals;
    LoaderStats stats;
    std::shared_ptr<detail::Ring> ring;
    bool use_threads = false;
    bool epoch_active = false;
    /// LoaderState::dataset_fingerprint of the source (computed at construction).
    std::string dataset_fingerprint;
    std::uint64_t skipped_records = 0;
    /// The epoch most recently started: where it started and the batches returned since.
    struct Progress {
        bool started = false;
        std::uint64_t epoch = 0;
        EpochStart start;
        std::uint64_t consumed = 0;
        std::uint64_t steps = 0;
        /// Budget batches: `EpochPlan::job_samples_before` of the epoch's plan.
        std::vector<std::uint64_t> job_samples_before;
        /// Consumed-id digest (LoaderState::consumed_digest) before plan steps digest_first,
        /// digest_first + 1, ... (at least one entry; the ones the consumer can still reach:
        /// from `consumed` to the end of the agreed window, a block of up to kDigestBlock
        /// steps ahead). Identical on every rank (`cover_digest`).
        std::uint64_t digest_first = 0;
        std::deque<std::uint64_t> digest_before;
        /// The digest after `consumed` steps of the plan.
        std::uint64_t digest() const { return digest_before.at(consumed - digest_first); }
    } progress;
    /// Budget batches: the sample costs the planner packs by (built at construction).
    SampleBytesFn sample_bytes;
    SampleTokensFn sample_tokens;
    /// Set by `restore` until the next `epoch()` call.
    std::optional<LoaderState> resume;
    /// The range of the epoch in flight (detached when the loader closes first).
    EpochRange::Impl* active = nullptr;
    /// Ranks were found in different loader calls (`divergence` says how); their positions
    /// differ until the next epoch starts.
    bool diverged = false;
    std::string divergence;
    /// Some rank closed (or destroyed) its loader: no collective of this loader is made again.
    bool peer_closed = false;
    /// Promised reads: the failure of this rank's read that is being agreed (set while
    /// `EpochRange::Impl::agree_failed_read` runs), so that ranks found in different calls on
    /// the way get that error instead of the mismatch (`resolve_mismatch`).
    LocalStatus failed_read;
    /// This rank closed the loader.
    bool closed = false;
    /// The window agreement of the epoch in flight, with its requests still pending (a range
    /// left early leaves them here; the next loader collective completes them first).
    detail::WindowState windows;
    /// `options.pipeline.prefetch`, its minimum over the ranks (agreed at construction): the shape
    /// of the window agreement must be the same everywhere (`detail::window_shape`).
    std::uint64_t min_prefetch = 1;
    /// The memory tier when `options.tier.stage` staged the data (destroyed, collectively, first).
    std::unique_ptr<detail::MemoryTier> tier;
    /// The device agreed at construction (detail::agree_device) and whether the ring is pinned.
    detail::LoaderDevice device;
    /// With a CUDA device: copies batches from their ring slots (device_delivery.hpp).
    /// Declared after the ring so it is destroyed first: its stream's queued host functions
    /// release ring slots, and must never free the ring's pinned memory themselves.
    std::unique_ptr<detail::DeviceStager> stager;

    /// What the pipeline reads from: the memory tier when staged, else the source.
    const Source& reader() const noexcept {
        return tier ? static_cast<const Source&>(*tier) : source;
    }

    /// The loader's own communicator: its one MPI_Comm_dup (see `CommRef::duplicate`).
    Impl(const CommRef& c, const Source& s, LoaderOptions o)
        : comm(c.duplicate()), source(s), options(std::move(o)) {}

    /// Collective: every option that decides the sequence (and the dataset's metadata) is
    /// the same on every rank.
    void require_same_options() const;
    /// Collective: the byte-range cut and the skew-correction statistics.
    void compute_cut();
    /// Not collective: allocates the ring of `slots` slots of `batch_capacity` samples each
    /// (checked against the node's memory: this rank's share among the node's ranks when the
    /// node split is known, else among all ranks, which `ring_needs_node_size` made sure of).
    void allocate_ring(std::uint64_t batch_capacity, std::uint64_t slots);
    /// Local: bounds the ring's waits for slots lent to the stager's copies (the stager's
    /// `check`, the loader's timeout; `detail::Ring::copy_check`). No-op without a stager.
    void watch_copies();
    /// Local: whether the ring of `allocate_ring` exceeds this rank's share of the node's
    /// memory among all ranks of the communicator, so that checking it needs the node's rank
    /// count (the node split). False when its size cannot be computed (allocate_ring then
    /// throws, agreed).
    bool ring_needs_node_size(std::uint64_t batch_capacity, std::uint64_t slots) const noexcept;
    /// Collective when `options.pipeline.two_phase` is `automatic` (the measurement of
    /// `detail::measure_two_phase_costs`, errors agreed): sets `stats.two_phase` (whether the
    /// epochs read in two phases; `on` always) and, for `automatic`, its note and predictions.
    /// Called once, at the end of construction (`use_threads` known).
    void resolve_two_phase();
    /// Collective (the node split, when the budget must be derived): with `Shuffle::chunks`
    /// sets chunk_samples and window_chunks left 0 from the stage budget; with stage auto over
    /// budget and a global shuffle switches it to `chunks`. Sets `stats.shuffle_note`. Called
    /// once, after the tier is built (src/loader/chunk_shuffle.cpp).
    void resolve_chunk_shuffle(const detail::TierStats& tier);
    /// Not collective: `stats.shuffle_note` for the chunk sizes in `options.plan` (called by
    /// `resolve_chunk_shuffle`, and again when a resume takes the saved sizes), with a warning
    /// where two windows of chunks exceed the read-ahead's budget.
    void describe_chunk_shuffle();
    /// Whether chunk_samples and window_chunks were derived (a restore then takes the
    /// state's), and the shuffle the caller asked for (stage auto may have chosen chunks).
    bool chunk_samples_derived = false;
    bool window_chunks_derived = false;
    Shuffle requested_shuffle = Shuffle::none;
    /// For the note: why the order is `chunks` when the caller asked for `global` (stage
    /// auto), whether the sizes came from a resumed state, and the mean bytes of a sample.
    std::string chunk_note_prefix;
    bool chunk_sizes_resumed = false;
    std::uint64_t chunk_sample_bytes = 0;
    /// Shuffle::chunks: the bytes per rank its read-ahead may hold (the stage budget).
    std::uint64_t read_ahead_budget = 0;
    /// The chunk read-ahead's mappings, reused across its epochs (within read_ahead_budget).
    std::shared_ptr<detail::ChunkPool> chunk_pool;
    /// Not collective: the cost functions of a batch budget (`sample_bytes`, `sample_tokens`).
    /// @throws ConfigError for a token field that is not the source's only ragged field.
    void make_cost_functions();
    /// Not collective: the plan of `epoch` from `start` on this rank (pure).
    EpochPlan plan_of(std::uint64_t epoch, const EpochStart& start) const;
    /// Collective: checks `state` against this loader (see Loader::restore) and keeps it.
    void apply_resume(const LoaderState& state);
    /// Not collective: this rank's share of the consumed-id digest of `state` (which every
    /// rank holds alike; its resume point already checked), computed from the plan its keys
    /// imply: fixed `global`, the epoch positions [0, samples_consumed) divided among the
    /// ranks; fixed `byte_range` (same W), this rank's first steps_consumed steps; a budget,
    /// this rank's part of [0, N) minus what `rest` (this rank's plan from the state's point)
    /// still yields (every sample is in exactly one budget batch). The shares sum to the
    /// digest minus its seed. O(consumed/W) time (budget: O(N/W)), O(1) memory.
    std::uint64_t consumed_share(const LoaderState& state, const EpochPlan* rest) const;
    /// Collective (one allreduce, skipped when nothing was consumed): the digest `state`'s
    /// keys imply. When the state carries one, a different one is the same ConfigError on
    /// every rank naming the keys; when it carries none (format versions 1 to 3), it is set.
    void check_consumed_digest(LoaderState& state, const EpochPlan* rest) const;
    /// Collective when the agreed window reaches past the known digests (the same on every
    /// rank): extends `progress.digest_before` to cover plan step `until` (≤ plan.steps), one
    /// allreduce of the per-step sums of a block of at least kDigestBlock steps.
    void cover_digest(const EpochPlan& plan, std::uint64_t until);
    /// Collective: `skipped_records` and `dataset_fingerprint` at `options.safety.fingerprint`
    /// (`detail::dataset_fingerprint`).
    void record_identity();
    /// Where epoch `e` starts (a pending resume of epoch e, else the beginning).
    EpochStart start_of(std::uint64_t e) const;
    /// Not collective: a tag of `kind` with where this rank left its last epoch.
    detail::SyncTag left_tag(detail::SyncKind kind) const;
    /// Collective: the tagged agreement of every loader collective after construction
    /// (`agree_tagged_or_throw`). When the tags differ, every rank gathers them, records the
    /// divergence and throws the same ConfigError naming each rank's call and step.
    TaggedAgreement sync(const detail::SyncTag& tag, const LocalStatus& status, std::uint64_t value,
                         bool stop);
    /// Collective (one started allreduce): starts the window request of plan step `step` in
    /// an epoch of `limit` steps, with the lag of `detail::WindowState::shape_at`; a `regular`
    /// one also sets the step of the next (`windows.next_start`).
    void start_window(const detail::SyncTag& tag, std::uint64_t step,
                      const detail::WindowReport& report, std::uint64_t limit, bool regular);
    /// Not collective: folds the window requests already complete, in order, into `windows`.
    /// @throws ConfigError as `sync` when one found ranks in different calls.
    void poll_windows(const detail::SyncTag& tag);
    /// Collective: waits for the oldest window request (watched) and folds it in.
    /// @throws ConfigError as `sync`.
    void wait_window(const detail::SyncTag& tag);
    /// Collective: waits for every window request in flight. @throws ConfigError as `sync`.
    void finish_windows(const detail::SyncTag& tag);
    /// Collective: ranks were found in different calls (`tag`: this rank's call). Completes
    /// this rank's requests in flight, then agrees in rounds until every rank reached here (a
    /// rank may have started more requests than another), gathers the tags and throws the
    /// same ConfigError on every rank (`detail::describe_mismatch`); when a promised read
    /// failed on some rank (`failed_read`), the error of the lowest such rank instead (a loop
    /// that breaks early, or stops calling `next()` after its last batch, while the failing
    /// rank still runs the protocol towards the step where the failure is due).
    /// @throws ConfigError (the mismatch) or the failed read's agreed error.
    [[noreturn]] void resolve_mismatch(const detail::SyncTag& tag);
    /// Not collective: the consumed-id digest is known up to plan step `until`.
    bool digest_covers(std::uint64_t until) const noexcept {
        return progress.digest_first + progress.digest_before.size() - 1 >= until;
    }
    /// Collective unless closed already or a peer closed: detaches the range in flight and
    /// checks, with a close tag, that every rank left its last epoch at the same step.
    /// @throws ConfigError as `sync`.
    void close();
    /// `close()` for the destructor: a mismatch is printed on stderr instead of thrown.
    void close_quietly() noexcept;
};

struct EpochRange::Impl {
    using Clock = std::chrono::steady_clock;
    Loader::Impl* loader = nullptr;
    /// A range of a loader over streams: its stream engine (`loader` is then null; both are
    /// null once the loader is gone), and whether it is one.
    detail::StreamEngine* stream = nullptr;
    bool of_stream = false;
    /// The batch most recently returned was one sample over the budget.
    bool last_oversize = false;
    EpochPlan plan;
    EpochTotals totals;
    std::uint64_t epoch = 0;
    /// Shuffle::chunks read from the files: the chunks read ahead in the plan's order, which
    /// the prefetcher reads from (declared before it, so it outlives the prefetcher's threads).
    std::unique_ptr<detail::ChunkReadAhead> read_ahead;
    std::unique_ptr<detail::Prefetcher> prefetch;
    // Consumer only:
    std::uint64_t next_consume = 0;
    /// Slots taken from the prefetcher for steps next_consume, next_consume + 1, ... in order,
    /// each with its read's outcome (the window agreement says which every rank holds).
    std::deque<std::pair<detail::Slot*, LocalStatus>> taken;
    /// With a CUDA device: the first `staged.size()` entries of `taken` were submitted to the
    /// loader's stager when they joined a window (their slot moved to the stager, which
    /// releases it once the copy completed); per entry the batch's host-side shape and stats.
    struct Staged {
        HostBatch shape;
        std::uint64_t step = 0;  // the slot's step
        std::uint64_t bytes = 0;
        std::size_t num_valid = 0;
        std::size_t size = 0;
    };
    std::deque<Staged> staged;
    Clock::time_point started{};
    bool finished = false;
    /// Batches this range yields at most (the plan's steps or EpochOptions::max_steps).
    std::uint64_t limit = 0;
    /// `EpochRange::request_stop()` (async-signal-safe); `stopped`: a stop was agreed.
    std::atomic<bool> stop_request{false};
    bool stopped = false;

    void shutdown() noexcept {
        // A range left before its end (a stop, an error) still counts its time (streams count
        // theirs in next_stream).
        if (!finished && next_consume > 0 && loader) {
            loader->stats.epoch_time += Clock::now() - started;
            finished = true;
        }
        if (prefetch) {
            for (auto& t : taken) {
                if (t.first) prefetch->ring()->release(t.first);
            }
            taken.clear();
        }
        staged.clear();
        if (loader && loader->stager) loader->stager->discard_pending();
        if (prefetch) {
            prefetch->shutdown();
        }
        if (read_ahead && loader) {  // its counters into the loader's, once
            const ReadAheadCounters r = read_ahead->stats();
            ReadAheadCounters& c = loader->stats.read_ahead;
            c.chunks_read += r.chunks_read;
            c.bytes_read += r.bytes_read;
            c.peak_resident_bytes = std::max(c.peak_resident_bytes, r.peak_resident_bytes);
            c.budget_bytes = r.budget_bytes;
            c.over_budget_reads += r.over_budget_reads;
            c.wait_seconds += r.wait_seconds;
            c.readers = std::max<std::uint64_t>(c.readers, r.readers);
            read_ahead.reset();
        }
        if (loader) {
            loader->epoch_active = false;
            if (loader->active == this) loader->active = nullptr;
        }
        detach_stream();
    }
    /// Streams: the engine forgets this range (stream_range.cpp).
    void detach_stream() noexcept;
    /// Streams: `EpochRange::next` (stream_range.cpp).
    bool next_stream(HostBatch& out);
    /// Not collective: takes the slot of step `next_consume` (waiting for it) and every later
    /// one already read; returns the first step this rank does not hold error-free.
    std::uint64_t fill_window();
    /// Collective: decides, the same way on every rank, whether batch `next_consume` may be
    /// returned: starts this step's window request when one is due, completes the requests
    /// that are `lag` steps old (and more only when no completed one covers the step).
    /// Sets `stopped` instead when an agreed stop takes effect at this step.
    /// @throws the agreed error of the earliest failed step, on every rank at the same step
    /// (that step; with promised reads up to a request's lag later: `agree_failed_read`).
    void agree_step();
    /// Collective: the window protocol of step `s` with this rank's `report` (`status`: its
    /// outcome at `s`, for an agreed error's broadcast). Returns false when an agreed stop
    /// takes effect at `s` (`stopped` set). @throws the agreed error due at `s`.
    bool window_protocol(std::uint64_t s, const detail::WindowReport& report,
                         const LocalStatus& status);
    /// Collective, with promised reads, on a rank whose read of step `next_consume` failed:
    /// yields no batch, but takes part in the window protocol of the following steps (as the
    /// peers, who run on) reporting the failure, until the step where every rank throws it.
    /// @throws the agreed error, always.
    [[noreturn]] void agree_failed_read(const LocalStatus& status);
    /// Collective, where every rank completes every request (a stop, a digest block, the
    /// range's end) at step `s`: with promised reads one more request first (`report`), then
    /// all completed; a failure any of them reported is thrown here (`status`: this rank's).
    void finish_all(std::uint64_t s, const detail::WindowReport& report, const LocalStatus& status);
    /// Collective at the end of the range (step `limit`): completes the requests in flight;
    /// with promised reads first one more (`report`), so that a failure no request reported
    /// yet is thrown here by every rank (`status`: this rank's outcome).
    void finish_range_windows(const detail::WindowReport& report, const LocalStatus& status);
    /// This rank's report at the range's end (every step ready; whether a stop was asked).
    detail::WindowReport end_report() const;
    /// This rank's mean wall time per step of the range so far (ns; 0 before the first).
    std::uint64_t step_ns() const;
    /// With a CUDA device: submits the copies of the window's error-free batches not yet
    /// submitted; a failure becomes the status of its step (agreed like a failed read).
    /// Returns the count of error-free entries of `taken` after it.
    std::size_t stage_window(std::size_t good);
    /// The tag of a window (or two-phase exchange) agreement at step `s`.
    detail::SyncTag window_tag(detail::SyncKind kind, std::uint64_t s) const;
};

}  // namespace mpistage
