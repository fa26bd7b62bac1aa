#pragma once
// A deadline around one blocking call that waits for other ranks (internal; see
// docs/architecture.md, "Collective safety").

#include <chrono>
#include <cstdint>
#include <string>

#include "mpistage/comm.hpp"

namespace mpistage::detail {

/// Exit code of a job ended by the watchdog (the same as the non-blocking watchdog's abort).
constexpr int kWatchdogAbortCode = 70;

/// Watches one blocking call that may wait for other ranks: a collective MPI-IO or HDF5 call
/// (`MPI_File_open`, `H5Fopen`, a collective `H5Dread`), a window allocation
/// (`MPI_Win_allocate_shared`), a communicator split. Unlike the `Communicator`'s own
/// collectives these cannot be polled, so a process-wide monitor thread holds their deadlines.
/// When the call has not returned within `comm.timeout()`, the monitor prints one line to
/// stderr naming the world rank, the call, the phase (`comm.context()`) and the timeout, then
/// ends the job with `MPI_Abort(MPI_COMM_WORLD, kWatchdogAbortCode)`, so the launcher (mpirun,
/// srun) kills every rank, a stopped one included. Which ranks did not arrive cannot be known
/// from inside a blocking collective: every rank that waits prints its own line, so the ranks
/// missing from the report are the ones that did not arrive (the library enters each group of
/// blocking calls right after a watched collective, which names absent ranks itself).
///
/// Arms nothing when the timeout is zero or the communicator has one rank. The destructor
/// disarms (noexcept). Thread-safe: guards may live on several threads. Cost: one mutex lock
/// and one condition-variable notification per guard; the monitor thread starts on first use
/// and sleeps until the earliest deadline.
class BlockingWatch {
public:
    /// Local (no MPI call). `call` names the blocking call, e.g. "H5Fopen(train.h5)".
    BlockingWatch(const Communicator& comm, std::string call);
    /// Local: the same watch where no `Communicator` is at hand any more (teardown of a window
    /// or file handle, `MPI_Finalize`): `timeout` and `ranks` are the deadline and rank count
    /// of the communicator the object was made on, `phase` is shown in the report. With
    /// `abort_mpi` false the expired process reports and calls `_Exit(kWatchdogAbortCode)`
    /// without `MPI_Abort` (inside `MPI_Finalize`, where MPI can no longer abort the job: the
    /// launcher then ends the other ranks). Noexcept: a watch that cannot be armed (no memory)
    /// arms nothing.
    BlockingWatch(std::chrono::seconds timeout, int ranks, std::string call, std::string phase,
                  bool abort_mpi = true) noexcept;
    ~BlockingWatch();
    BlockingWatch(const BlockingWatch&) = delete;
    BlockingWatch& operator=(const BlockingWatch&) = delete;

private:
    std::uint64_t id_ = 0;  // 0: nothing armed
};

}  // namespace mpistage::detail
