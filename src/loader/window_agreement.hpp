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
    std::uint64_t ready_until = 0;
    /// The read of step `ready_until` failed on this rank.
    bool failed = false;
    /// A stop was requested on this rank (EpochRange::request_stop, mpistage::request_stop).
    bool stop = false;
};

/// The four words of a window request (the shape of every tagged loader agreement:
/// `agree_tagged_or_throw`): the tag, its complement, (ready_until, failing rank or W) packed
/// so that the minimum is the earliest step some rank lacks, with its lowest failing rank, and
/// the stop flag inverted.
std::vector<std::uint64_t> window_words(std::uint64_t tag_hash, const WindowReport& report,
                                        int rank, int size);

/// One started window request: the step (of the plan) at which every rank started it.
struct WindowRequest {
    PendingAllreduce request;
    std::uint64_t step = 0;
};

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
    /// The step of the last request started (kNoStep: none this epoch).
    std::uint64_t last_start = kNoStep;
    /// A completed request found ranks in different calls; nothing else here counts then.
    bool mismatch = false;
    /// Steps a request may stay in flight; steps between regular starts.
    std::uint64_t lag = 0;
    std::uint64_t group = 1;

    /// Not collective: a new epoch (no request may be pending).
    void reset(std::uint64_t lag_steps, std::uint64_t group_steps);
    /// Not collective: folds the completed front request into the agreed outcome and pops it.
    /// Sets `mismatch` (and returns false) when the tags differed.
    bool absorb_front(int size);
};

/// Not collective: the lag and the start interval of a window agreement for a prefetch depth
/// (its minimum over the ranks) and `steps` per epoch: half the depth in flight, the other
/// half between starts, so that at the forced completion the peers' reports (made with a full
/// ring) already cover the step; steps read collectively (two-phase) get lag 0, group 1.
void window_shape(std::uint64_t min_prefetch, std::uint64_t steps, bool collective_steps,
                  std::uint64_t& lag, std::uint64_t& group);

}  // namespace mpistage::detail
