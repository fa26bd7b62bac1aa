#pragma once
// Calls that wait for peers, made interruptible by Ctrl-C (internal to the extension).
//
// A blocking loader call (`EpochRange::next`) waits inside the library for data or for peers,
// with the GIL released, so Python's SIGINT handler only sets a flag that nobody reads until
// the call returns: a rank whose peer is late ignored Ctrl-C until the watchdog aborted the job.
// `interruptible` runs the call on one worker thread of the process and waits for it in slices
// of 50 ms, taking the GIL between slices to run `PyErr_CheckSignals`: a pending
// KeyboardInterrupt (or any exception a signal handler raises) is raised in the caller within
// about 50 ms. The call itself cannot be abandoned (it is inside a collective protocol), so it
// completes in the background: its result is kept for the next call on the same object (a
// caught Ctrl-C loses no batch), and every other call on the loader first `settle`s it. The
// peers see the interrupted rank through the loader's own agreement: its next loader call
// (`close()`, the destructor at exit, `epoch()`) meets their `next()` and every rank gets the
// same ConfigError naming each rank's call and step.
//
// Needs MPI_THREAD_SERIALIZED or better (mpi4py asks for MPI_THREAD_MULTIPLE): the worker makes
// the call's MPI calls while the caller makes none. Below that, and for calls made from a thread
// other than Python's main thread (signals are handled there only), the call runs on the caller.

#include <functional>

#include "bindings.hpp"

namespace mpistage::python {

/// Runs `call(out)` (which must not touch Python objects) with the GIL released, interruptible
/// by signals as above. `owner`: the Python object the call works on (an EpochRange); it is
/// kept alive while the call runs, and the result of a call interrupted earlier on the same
/// owner is returned first (`call` is then not made). Returns `call`'s result; rethrows its
/// exception. @throws py::error_already_set with the signal handler's exception
/// (KeyboardInterrupt). Called with the GIL held.
bool interruptible_next(const py::handle& owner, const std::function<bool(HostBatch&)>& call,
                        HostBatch& out);

/// Waits (GIL released, no signal checks) for a call interrupted earlier to complete and drops
/// its result (a batch returns its ring slot). Called before any other use of a loader or a
/// range. Called with the GIL held; returns at once when no call is in flight.
void settle();

/// Records the calling thread as Python's main thread (module initialisation).
void init_interruptible();

}  // namespace mpistage::python
