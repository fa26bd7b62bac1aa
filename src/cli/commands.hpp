#pragma once
// The commands of the `mpistage` executable (internal to the CLI). Each is collective over
// `comm` and throws the same `Error` on every rank.

#include "cli/args.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"

namespace mpistage::cli {

/// Collective: `mpistage stage`. Returns the exit code: 0, 75 when a --stop-signals signal
/// stopped it (cli/stop_signals.hpp), or 1 when --verify found a
/// violation. @throws Error subclasses, identical on every rank.
int run_stage(Communicator& comm, const StageArgs& a);

/// Collective: `mpistage convert idx` (rank 0 converts, the others wait for the outcome).
/// @throws Error subclasses, identical on every rank.
void run_convert(const Communicator& comm, const ConvertArgs& a);

/// Collective: `mpistage index` (parallel scan; rank 0 writes the index files).
/// @throws Error subclasses, identical on every rank.
void run_index(const Communicator& comm, const IndexArgs& a);

}  // namespace mpistage::cli
