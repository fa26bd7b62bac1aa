#pragma once
// The communicator a public constructor (or collective function) runs its collectives on,
// made from the `CommRef` it was given (internal; see `CommRef` in mpistage/comm.hpp).

#include <optional>

#include "mpistage/comm.hpp"

namespace mpistage::detail {

/// For an object that needs a communicator only during the call (a source that keeps none,
/// `open_source`, `write_dali_index`): the caller's `Communicator` itself, borrowed (no MPI
/// call, its watchdog settings and node split used as they are), or, for a plain `MPI_Comm`,
/// a duplicate made here: the one `MPI_Comm_dup` of the call (the launcher check first), freed
/// when this holder is destroyed. A communicator handed over by `pass()` is taken as is.
/// Move-only, not thread-safe.
class CallComm {
public:
    /// Collective over the borrowed communicator when it is a plain `MPI_Comm` (see above);
    /// local otherwise. @throws as `Communicator(MPI_Comm, timeout)`.
    explicit CallComm(const CommRef& ref);
    CallComm(const CallComm&) = delete;
    CallComm& operator=(const CallComm&) = delete;

    const Communicator& get() const noexcept { return own_ ? *own_ : *borrowed_; }
    /// Local: a `CommRef` for the one object this call builds that keeps a communicator (the
    /// HDF5 source of `open_source`): it takes the duplicate made here instead of making a
    /// second one, or duplicates the caller's `Communicator`. `get()` must not be used after
    /// that object took it.
    CommRef pass() noexcept;

private:
    std::optional<Communicator> own_;
    const Communicator* borrowed_ = nullptr;
};

}  // namespace mpistage::detail
