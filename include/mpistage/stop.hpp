#pragma once
/// @file
/// Stopping an epoch on request: a process-wide, async-signal-safe flag that every loader's
/// agreement carries, so a signal that reaches some ranks stops all of them at the same step
/// (docs/architecture.md, "Ending an epoch early"; docs/resume.md, "Stopping on a signal").

#include <vector>

namespace mpistage {

/// Not collective, async-signal-safe (one lock-free atomic store), any thread: asks every
/// loader of this process to end its epoch. Each `EpochRange::next()` window request carries
/// the request, so the stop is agreed: reading from files at most `prefetch` − 1 batches
/// later, from the memory tier about 60 ms of steps later (docs/architecture.md, "Agreement
/// that does not wait on scheduling"), the range ends on every rank at the same step, also on
/// ranks that got no request, and `EpochRange::stopped()` is true there (at the epoch's end
/// when the stop was agreed only there). The request stays set (later epochs stop at their first
/// window) until `clear_stop_request()`.
void request_stop() noexcept;
/// Not collective, async-signal-safe: whether `request_stop()` was called in this process
/// (or one of the signals of `install_stop_signals` arrived). Local: other ranks may not have
/// been asked; decide collectively with `EpochRange::stopped()`.
bool stop_requested() noexcept;
/// Not collective: the signal number that requested the stop (0: none, or `request_stop()`).
int stop_signal() noexcept;
/// Not collective: forgets a stop request.
void clear_stop_request() noexcept;
/// Not collective: installs, for each signal number in `signals` (e.g. SIGUSR1, SIGTERM, as
/// Slurm sends before it kills a job: `sbatch --signal`), a handler that only calls
/// `request_stop()` (async-signal-safe) and records the signal. The trainer then ends its
/// epoch at the agreed step, saves `Loader::state()` and exits. Replaces earlier handlers of
/// those signals. @throws ConfigError for a signal that cannot be caught (SIGKILL, SIGSTOP) or
/// out of range, naming it.
void install_stop_signals(const std::vector<int>& signals);

}  // namespace mpistage
