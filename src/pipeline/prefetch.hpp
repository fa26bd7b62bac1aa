#pragma once
// Ordered, bounded prefetch of one epoch: I/O threads fill free ring slots in step order and
// the consumer takes them strictly in plan order. Exceptions of the threads travel to the
// consumer as std::exception_ptr. No MPI call is made here; the caller agrees on the outcome.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "pipeline/ring.hpp"

namespace mpistage::detail {

/// A collective reader of whole steps (two-phase reads, src/two_phase/two_phase.hpp): fills `slot`
/// (nullptr when none is free; `status` then says why) with step `step`, taking part in the
/// step's exchange whatever happened, and returns this rank's outcome.
using StepReader = std::function<LocalStatus(Slot* slot, std::uint64_t step, LocalStatus status)>;

/// Not thread-safe for the consumer side (one consumer); the I/O threads are internal.
class Prefetcher {
public:
    /// `plan` and `source` must outlive the prefetcher; `epoch` only names the epoch in errors.
    /// With a `step_reader`, every step is read by it on the consumer thread inside `take`
    /// (collective: each rank takes every step once, in order); no I/O thread is started and
    /// `take_if_ready` returns nothing. A `fallback` (outliving the prefetcher) is read where
    /// `source` failed (`fill_slot`).
    Prefetcher(std::shared_ptr<Ring> ring, const Source& source, const EpochPlan& plan,
               std::uint64_t epoch, StepReader step_reader = {}, const Source* fallback = nullptr);
    Prefetcher(const Prefetcher&) = delete;
    Prefetcher& operator=(const Prefetcher&) = delete;
    ~Prefetcher() { shutdown(); }

    /// Starts up to `count` I/O threads (0: `take` reads on the caller's thread) and returns
    /// how many run. A thread that cannot be started (e.g. `RLIMIT_NPROC`) is not an error:
    /// the ones started read every step (none: the caller's thread does), the batches are the
    /// same, and the first such failure of the process is printed once to stderr. So no rank
    /// needs to agree on it, and an epoch starts without a collective after its threads.
    std::size_t start(std::size_t count) noexcept;
    /// The slot of step `step` (steps must be taken in order), or nullptr with a failed
    /// `status` when every slot is held by the caller. A failed read yields its slot with the
    /// read's error in `status`.
    Slot* take(std::uint64_t step, LocalStatus& status);
    /// Like `take`, but never waits: the slot of `step` when it is already read (with I/O
    /// threads) or when a free slot exists to read it into now (without), else nullptr with
    /// `status` untouched.
    Slot* take_if_ready(std::uint64_t step, LocalStatus& status);
    /// Stops and joins the threads; slots read but not taken return to the ring. Idempotent.
    void shutdown() noexcept;
    const std::shared_ptr<Ring>& ring() const noexcept { return ring_; }
    /// True when steps are read collectively (a step reader): `take` makes collectives.
    bool collective_steps() const noexcept { return static_cast<bool>(step_reader_); }

private:
    void worker();
    Slot* take_inline(std::uint64_t step, LocalStatus& status);
    Slot* take_stepped(std::uint64_t step, LocalStatus& status);
    std::string slots_held_message(std::uint64_t step) const;

    std::shared_ptr<Ring> ring_;
    const Source& source_;
    const Source* fallback_ = nullptr;
    const EpochPlan& plan_;
    std::uint64_t epoch_ = 0;
    StepReader step_reader_;
    std::vector<std::thread> threads_;
    // Guarded by ring_->m:
    std::map<std::uint64_t, std::pair<Slot*, std::exception_ptr>> ready_;
    std::uint64_t next_issue_ = 0;
    std::size_t in_flight_ = 0;
    bool stop_ = false;
};

/// Fault injection for tests (tests/mpi/loader/test_loader_io_threads.cpp), as an
/// `RLIMIT_NPROC` would: every later `Prefetcher::start` of this process starts at most
/// `max_started` threads, and its next thread start fails with `std::system_error` (EAGAIN),
/// which ends that call's starts. SIZE_MAX (the default) lifts the limit. Thread-safe (an
/// atomic).
void limit_io_thread_starts(std::size_t max_started) noexcept;
/// `Prefetcher::start` calls of this process cut short by `limit_io_thread_starts` (one per
/// call, however many threads it then lacks). Thread-safe.
std::uint64_t refused_io_thread_starts() noexcept;

}  // namespace mpistage::detail
