#pragma once
// Ordered, bounded prefetch of one epoch: I/O threads fill free ring slots in step order and
// the consumer takes them strictly in plan order. Exceptions of the threads travel to the
// consumer as std::exception_ptr. No MPI call is made here; the caller agrees on the outcome.

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "pipeline/ring.hpp"

namespace mpistage::detail {

/// Not thread-safe for the consumer side (one consumer); the I/O threads are internal.
class Prefetcher {
public:
    /// `plan` and `source` must outlive the prefetcher; `epoch` only names the epoch in errors.
    Prefetcher(std::shared_ptr<Ring> ring, const Source& source, const EpochPlan& plan,
               std::uint64_t epoch);
    Prefetcher(const Prefetcher&) = delete;
    Prefetcher& operator=(const Prefetcher&) = delete;
    ~Prefetcher() { shutdown(); }

    /// Starts `count` I/O threads (0: `take` reads on the caller's thread).
    /// @throws IoError when a thread cannot be started (the started ones keep running until
    /// `shutdown`).
    void start(std::size_t count);
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

private:
    void worker();
    Slot* take_inline(std::uint64_t step, LocalStatus& status);
    std::string slots_held_message(std::uint64_t step) const;

    std::shared_ptr<Ring> ring_;
    const Source& source_;
    const EpochPlan& plan_;
    std::uint64_t epoch_ = 0;
    std::vector<std::thread> threads_;
    // Guarded by ring_->m:
    std::map<std::uint64_t, std::pair<Slot*, std::exception_ptr>> ready_;
    std::uint64_t next_issue_ = 0;
    std::size_t in_flight_ = 0;
    bool stop_ = false;
};

}  // namespace mpistage::detail
