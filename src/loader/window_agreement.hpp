#pragma once
// The loader's window agreement that does not wait on scheduling (internal; docs/
// architecture.md, "Agreement that does not wait on scheduling"): each window's tagged
// allreduce is started without blocking and completed up to `lag` steps later, so a rank waits
// only when a peer is truly behind, while errors, stops and the end of an epoch still take
// effect at the same step on every rank.

#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#include "comm/pending.hpp"
#include "mpistage/comm.hpp"

namespace mpistage::detail {

constexpr std::uint64_t kNoStep = std::numeric_limits<std::uint64_t>::max();

/// What one rank tells the others in a window request, at the step it starts it.
struct WindowReport {
    /// First step this rank does not hold read and error-free (steps below it are ready).
    /// With promised reads (`WindowState::promise`) the end of the epoch, unless a read failed.
    std::uint64_t ready_until = 0;
    /// The read of step `ready_until` failed on this rank.
    bool failed = false;
    /// A stop was requested on this rank (EpochRange::request_stop, mpistage::request_stop).
    bool stop = false;
    /// This rank's mean wall time per step of the epoch so far, in nanoseconds (0: unknown).
    std::uint64_t step_ns = 0;
};

/// The four words of a window request (the shape of every tagged loader agreement:
/// `agree_tagged_or_throw`): the tag, its complement, (ready_until, failing rank or W) packed
/// so that the minimum is the earliest step some rank lacks, with its lowest failing rank, and
/// the stop flag inverted in the top bit with the step time's complement below it (the
/// minimum: any stop, and the largest step time).
std::vector<std::uint64_t> window_words(std::uint64_t tag_hash, const WindowReport& report,
                                        int rank, int size);

/// One started window request: the step (of the plan) at which every rank started it, and the
/// steps it may stay in flight (it is complete on every rank at step + lag).
struct WindowRequest {
    PendingAllreduce request;
    std::uint64_t step = 0;
    std::uint64_t lag = 0;
};

/// Wall time of steps a request may stay in flight with promised reads: longer than the time
/// slices a scheduler gives the processes sharing a core, so that a rank runs on while a peer
/// is descheduled; it bounds the latency of an agreed stop (about 1.25 × this).
constexpr std::uint64_t kPromiseLagNs = 50'000'000;

/// The agreed outcome of the window requests completed so far (identical on every rank once
/// the same requests are completed) and the requests still in flight, in start order.
struct WindowState {
    std::deque<WindowRequest> pending;
    /// Steps below `credit` are held read and error-free by every rank.
    std::uint64_t credit = 0;
    /// The step at which an agreed stop ends the range (start step + lag of the first request
    /// carrying a stop), or kNoStep.
    std::uint64_t stop_at = kNoStep;
    /// The earliest step whose read failed on some rank (kNoStep: none) and the lowest
    /// failing rank there.
    std::uint64_t error_step = kNoStep;
    std::uint64_t error_rank = 0;
    /// The step at which every rank throws that error: `error_step` itself (no credit passes
    /// it), or with promised reads the start step + lag of the first request carrying it.
    std::uint64_t error_at = kNoStep;
    /// The step of the last request started (kNoStep: none this epoch).
    std::uint64_t last_start = kNoStep;
    /// The step of the next regular request.
    std::uint64_t next_start = 0;
    /// The step at which the request started last is complete on every rank (start + lag).
    std::uint64_t last_due = 0;
    /// A completed request found ranks in different calls; nothing else here counts then.
    bool mismatch = false;
    /// Reads are promised (the memory tier, after staging): the whole epoch is credited, a
    /// failed read is agreed at the step where the request reporting it is due (`error_at`),
    /// and the lag follows the agreed step time (`shape_at`).
    bool promise = false;
    /// The lag and the start interval of the prefetch depth (`window_shape`).
    std::uint64_t base_lag = 0;
    std::uint64_t base_group = 1;
    /// Promised reads: the agreed step time of the completed requests, with the step from which
    /// every rank holds it (start + lag), in start order; `step_ns`: the latest one in force.
    std::deque<std::pair<std::uint64_t, std::uint64_t>> timings;
    std::uint64_t step_ns = 0;

    /// Not collective: a new epoch of `limit` steps (no request may be pending); with promised
    /// reads every step is credited from the start and the agreed step time carries over.
    void reset(std::uint64_t lag_steps, std::uint64_t group_steps, bool promised,
               std::uint64_t limit);
    /// Not collective, the same on every rank: the lag of a request started now at step `s`
    /// and the steps until the next regular one, for an epoch of `limit` steps (records
    /// `last_due`). The prefetch depth's (`base_lag`, `base_group`); with promised reads, at
    /// least the steps of kPromiseLagNs at the step time in force at `s`, at most to the
    /// epoch's end, never due before the request started last (requests complete in start
    /// order), and a quarter of it between regular starts.
    void shape_at(std::uint64_t s, std::uint64_t limit, std::uint64_t& lag, std::uint64_t& group);
    /// Not collective: folds the completed front request into the agreed outcome and pops it.
    /// Sets `mismatch` (and returns false) when the tags differed.
    bool absorb_front(int size);
    /// Not collective: an error is known and every rank throws it at step `s` (the same step
    /// on every rank: `error_at`, or `s` when no credit passes it).
    bool error_due(std::uint64_t s) const noexcept {
        return error_step != kNoStep && (error_at <= s || credit <= s);
    }
};

/// Not collective: the lag and the start interval of a window agreement for a prefetch depth
/// (its minimum over the ranks) and `steps` per epoch: half the depth in flight, the other
/// half between starts, so that at the forced completion the peers' reports (made with a full
/// ring) already cover the step; steps read collectively (two-phase) get lag 0, group 1.
void window_shape(std::uint64_t min_prefetch, std::uint64_t steps, bool collective_steps,
                  std::uint64_t& lag, std::uint64_t& group);

}  // namespace mpistage::detail
