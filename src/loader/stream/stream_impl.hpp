#pragma once
// The private state of StreamLoader, shared by the stream_*.cpp files of this folder.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "loader/stream/stream_item.hpp"
#include "loader/stream/stream_plan.hpp"
#include "loader/stream/stream_prefetch.hpp"
#include "mpistage/stream.hpp"

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

}  // namespace mpistage::detail

namespace mpistage {

struct StreamLoader::Impl {
    Communicator comm;
    const StreamSource& source;
    StreamOptions options;
    /// The state this loader resumed from (empty streams when it started fresh).
    StreamState resumed;
    std::vector<detail::StreamCursor> cursors;
    /// The I/O threads reading `cursors` ahead (`StreamOptions::io_threads` ≥ 1), else null.
    /// Declared after the cursors: destroyed (its threads joined) before them.
    std::unique_ptr<detail::StreamPrefetch> prefetch;
    std::size_t next_cursor = 0;  ///< round-robin over cursors
    std::deque<detail::StreamItem> queue;
    StreamSample scratch;
    StreamStats stats;
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
    /// Valid samples every rank yielded (the resumed state's included); `StreamState::delivered`.
    std::uint64_t delivered_all = 0;
    /// The ids every rank yields at each agreed step not yet taken, oldest first: runs of item
    /// ids (first, count) of all ranks (`announce`).
    std::deque<std::vector<std::uint64_t>> announced;

    /// The loader's own communicator: its one MPI_Comm_dup (see `CommRef::duplicate`).
    Impl(const CommRef& c, const StreamSource& s, StreamOptions o)
        : comm(c.duplicate()), source(s), options(std::move(o)) {}

    /// Collective: options, fields, stream count and the resumed state agree across ranks.
    void check_agreement(const StreamState* resume);
    /// Local: opens the streams this rank reads. @throws what the source throws.
    void open_cursors();
    /// Local: starts the I/O threads over the open cursors (`StreamOptions::io_threads` ≥ 1;
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
    /// Collective: one step; false when every rank is dry.
    bool step(HostBatch& out);
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

}  // namespace mpistage
