#pragma once
// The checks of `mpistage stage` that need no other rank: arguments, inputs probed before
// anything opens them, flags that do not apply, destinations, and a --resume state read.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/checkpoint.hpp"
#include "cli/flag_rules.hpp"
#include "mpistage/comm.hpp"

namespace mpistage::cli {

/// What the local checks found, on one rank.
struct LocalChecks {
    StageInput input;
    /// FILE input: the detected --format.
    std::string format;
    /// --resume: the saved state (every rank reads it).
    std::optional<SavedState> resume;
    /// Rank 0 with --verify: the ids the resumed epoch delivered before (files: the id log;
    /// streams: the rows the state had delivered), and on every rank how many there are.
    std::vector<std::int64_t> prior_ids;
    std::uint64_t prior_count = 0;
    /// FILE input: the --stop-signals to install.
    std::vector<int> stop_signals;
};

/// Local (no collective; the caller agrees on the outcome): everything that can be checked on
/// one rank before any collective that depends on the arguments. Probes each input before
/// anything opens it (a FIFO would block open()). @throws ConfigError, IoError.
LocalChecks check_locally(const Communicator& comm, const StageArgs& a);

}  // namespace mpistage::cli
