#pragma once
// The stream half of the one Loader: a stream planner that decides each window's steps from what
// the ranks' readers produced (chunk, hash, source sharding; dry ranks; end-of-stream agreement),
// with the readers and their read-ahead. `Loader` and `EpochRange` (loader.cpp, epoch_range.cpp)
// drive it; its state is shared by the stream_*.cpp files of this folder.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "device/device_choice.hpp"
#include "device/device_stager.hpp"
#include "loader/stream/stream_config.hpp"
#include "loader/stream/stream_item.hpp"
#include "loader/stream/stream_plan.hpp"
#include "loader/stream/stream_prefetch.hpp"
#include "mpistage/loader.hpp"

namespace mpistage::detail {

/// One stream this rank reads: its reader, its position, and which positions are its own.
struct StreamCursor {
    std::uint64_t stream = 0;
    std::unique_ptr<StreamReader> reader;
    PositionFilter filter;
    /// Positions below this were read, skipped or discarded.
    std::uint64_t position = 0;
    bool ended = false;
};

class StreamEngine {
public:
    Communicator comm;
    const StreamSource& source;
    /// The loader's options as given (`Loader::options`), and the settings taken from them.
    LoaderOptions loader_options;
    StreamConfig options;
    /// The state this loader resumed from (a stream state with no streams when it started
    /// fresh), and whether the pass it stands in is still to be continued by `epoch()`.
    LoaderState resumed;
    bool resume_pending = false;
    /// The pass in flight (the last `begin_pass` epoch) and whether one began.
    std::uint64_t epoch = 0;
    bool pass_begun = false;
    /// Steps of the pass before the current range began (so a range counts its own).
    std::uint64_t range_first_step = 0;
    /// A stop was agreed: the current pass ended at `steps` on every rank.
    bool stopped = false;
    /// `Loader::close()` was called on this rank.
    bool closed = false;
    /// The range of the pass in flight (an `EpochRange::Impl`), null when none.
    void* active_range = nullptr;
    /// The device agreed at construction (`agree_device`, as for files) and, with CUDA, the
    /// loader's stager: each batch is copied to the device through it (`deliver`).
    LoaderDevice device;
    std::unique_ptr<DeviceStager> stager;
    /// A batch's copy to the device failed on this rank: reported at the next agreement, so
    /// that every rank throws it (`deliver`).
    std::optional<LocalStatus> device_failure;
    std::vector<detail::StreamCursor> cursors;
    /// The I/O threads reading `cursors` ahead (`StreamConfig::io_threads` ≥ 1), else null.
    /// Declared after the cursors: destroyed (its threads joined) before them.
    std::unique_ptr<detail::StreamPrefetch> prefetch;
    std::size_t next_cursor = 0;  ///< round-robin over cursors
    std::deque<detail::StreamItem> queue;
    StreamSample scratch;
    LoaderStats stats;
    std::uint64_t steps = 0;
    std::uint64_t delivered_before = 0;  ///< valid samples of all ranks before this loader
    bool finished = false;
    bool last_oversize = false;
    /// The agreed error once a step failed: later calls throw it again without collectives.
    std::optional<LocalStatus> failure;
    /// Steps still agreed by the last window agreement: every rank holds a full batch for
    /// each, so they are yielded without a collective.
    std::uint64_t window_left = 0;
    /// A read that failed while reading ahead for a window (with a full batch queued before
    /// it): thrown by the next read this rank needs, so that the error is agreed at the step
    /// that needs the row, and the failed reader is never called again.
    std::optional<LocalStatus> read_failure;
    /// What every rank of the pass has yielded, identical on every rank (so `state()` is
    /// local): per stream, the yielded positions as disjoint ranges [begin → end), merged as
    /// they touch. Set from the resumed state (its consumed positions) and extended at every
    /// step by the step's announced ids.
    std::vector<std::map<std::uint64_t, std::uint64_t>> yielded;
    /// Valid samples every rank yielded in the pass (the resumed state's included): the
    /// state's `samples_consumed`.
    std::uint64_t delivered_all = 0;
    /// The ids every rank yields at each agreed step not yet taken, oldest first: runs of item
    /// ids (first, count) of all ranks (`announce`).
    std::deque<std::vector<std::uint64_t>> announced;

    /// Collective: the loader's own communicator (its one MPI_Comm_dup, see
    /// `CommRef::duplicate`), the options, fields and stream count checked across ranks, and
    /// this rank's streams opened (from `resume`, a stream state, when given).
    /// @throws ConfigError, the source's errors, MpiError; identical on every rank.
    StreamEngine(const CommRef& c, const StreamSource& s, LoaderOptions o,
                 const LoaderState* resume);
    /// Collective: starts pass `e` (the resumed pass when its epoch is asked first, else every
    /// stream from its first item). @throws the agreed error of an earlier step, and what the
    /// source's `open` throws, identical on every rank.
    void begin_pass(std::uint64_t e);
    /// Collective: the next batch of the pass, or false on every rank once no rank holds items
    /// or a stop was agreed (`stop`: this rank asks for one). @throws the same Error on every
    /// rank when any rank's stream threw (again on later calls).
    bool next(HostBatch& out, bool stop);
    /// Local: where the loader stands, identical on every rank (after a pass consumed to its
    /// end: the start of the next epoch).
    LoaderState state() const;
    /// Local: forgets `range` when it is the active one (it ended or is being destroyed).
    void detach(void* range) noexcept;

    /// Collective: options, fields, stream count and the resumed state agree across ranks.
    void check_agreement(const LoaderState* resume);
    /// Local: opens the streams this rank reads. @throws what the source throws.
    void open_cursors();
    /// Local: starts the I/O threads over the open cursors (`StreamConfig::io_threads` ≥ 1;
    /// none start where the system refuses threads: then this thread reads).
    void start_prefetch();
    /// Local: true when every cursor ended.
    bool exhausted() const;
    /// Local: reads one item of this rank's streams (round-robin); false when all ended.
    bool read_one(detail::StreamItem& out);
    /// Local: reads until the queue fills a batch with `extra` items to spare, or the
    /// streams end (hash: reads `extra` items, or a batch's worth when the queue is short,
    /// into `outgoing` per owner rank). `ahead`: reads on until the queue holds
    /// `window_steps` batches' worth of items or `window_bytes` (not under hash).
    void fill(std::uint64_t extra, std::vector<std::string>& outgoing, bool ahead);
    /// Collective: one step; false when every rank is dry or a stop was agreed.
    bool step(HostBatch& out, bool stop);
    /// With a CUDA device: copies `out` to the device (the loader's delivery: `submit_batch`,
    /// `take_batch`; the consumer's stream waits on the copy, the host does not). A failure
    /// is agreed: this rank takes the steps every rank holds without a collective (dropping
    /// their batches), then reports it at the agreement where the others arrive, and every
    /// rank throws the same CudaError. @throws that error.
    void deliver(HostBatch& out);
    /// Local: drops the pass's readers and queue and reopens every stream from its first item
    /// (collective through `run_agreed`).
    void restart_pass();
    /// Collective: moves items from ranks with surplus to those with a deficit.
    void rebalance(const std::vector<detail::RankStep>& ranks);
    /// Local: removes the chosen samples from the queue and builds the batch.
    HostBatch make_batch(const detail::BatchChoice& choice);
    /// Local: the costs of the queued samples `choose_batch` may take for the next `batches`
    /// batches (the whole queue with length buckets).
    std::vector<detail::SampleCost> queue_costs(std::uint64_t batches = 1) const;
    /// Local: `yielded` and `delivered_all` from the resumed state (empty when fresh).
    void reset_yielded();
    /// Local: the item ids (`stream_item_id`) of the next `batches` batches `make_batch` takes
    /// from the queue as it stands, one sorted list per batch (a simulation of the same
    /// `choose_batch` calls, the queue untouched).
    std::vector<std::vector<std::uint64_t>> next_batch_ids(std::uint64_t batches) const;
    /// Collective (one allgatherv): every rank's ids of its next `batches` batches
    /// (`next_batch_ids`; `batches` is the same on every rank), appended to `announced` per step.
    void announce(std::uint64_t batches);
    /// Local: adds the front of `announced` (this step's ids of every rank) to `yielded`.
    void record_step();
    /// Fingerprint of the source and of the options that decide ownership.
    std::string state_fingerprint() const;
};

}  // namespace mpistage::detail
