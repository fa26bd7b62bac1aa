#pragma once
// A non-blocking allreduce started now and completed later (internal): the loader's window
// agreement starts one per window and completes it windows later (docs/architecture.md,
// "Agreement that does not wait on scheduling"). The wait goes through the communicator's
// watchdog like every other collective, under the sequence number taken at the start.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "mpistage/comm.hpp"

namespace mpistage::detail {

/// One started `MPI_Iallreduce(MPI_MIN)` of unsigned 64-bit words on a `Communicator`.
///
/// Collective in MPI's sense: every rank must start the same sequence of collectives on the
/// communicator (pending ones included) in the same order. Completing is local: `test()`
/// never blocks; `wait()` blocks under the watchdog (deadline `comm.timeout()`, report naming
/// the ranks that did not arrive). The buffers live on the heap, so the object may move.
/// Destroying an incomplete one leaks its request and buffers (a collective cannot be
/// cancelled, and waiting could wait for a rank that never starts it); callers complete their
/// requests first. Not thread-safe; the
/// communicator must outlive it.
class PendingAllreduce {
public:
    PendingAllreduce() = default;
    /// Starts the allreduce of `values` (the same count on every rank). @throws MpiError.
    PendingAllreduce(const Communicator& comm, std::vector<std::uint64_t> values, const char* call);
    PendingAllreduce(PendingAllreduce&&) noexcept = default;
    PendingAllreduce& operator=(PendingAllreduce&& o) noexcept;
    PendingAllreduce(const PendingAllreduce&) = delete;
    PendingAllreduce& operator=(const PendingAllreduce&) = delete;
    ~PendingAllreduce();

    /// Local: true once complete (the result is then in `result()`). @throws MpiError.
    bool test();
    /// Blocks until complete, under the watchdog; returns the element-wise minimum.
    /// @throws MpiError.
    const std::vector<std::uint64_t>& wait();
    bool done() const noexcept { return !state_ || state_->done; }
    const std::vector<std::uint64_t>& result() const noexcept { return state_->out; }

private:
    struct State {
        const Communicator* comm = nullptr;
        const char* call = "";
        std::uint64_t seq = 0;
        MPI_Request request = MPI_REQUEST_NULL;
        std::vector<std::uint64_t> in;
        std::vector<std::uint64_t> out;
        bool done = false;
    };
    void finish_quietly() noexcept;
    std::unique_ptr<State> state_;
};

}  // namespace mpistage::detail
