#pragma once
// `mpistage stage --verify`: the exactly-once check of one epoch (internal to the CLI).

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"

namespace mpistage::cli {

/// What one epoch yielded on every rank (all vectors indexed by rank).
struct EpochReport {
    std::uint64_t epoch = 0;
    /// Batches each rank yielded.
    std::vector<std::uint64_t> batches;
    /// Valid samples each rank yielded (only with --verify).
    std::vector<std::uint64_t> valid;
    std::uint64_t duplicates = 0;
    std::uint64_t missing = 0;
    std::uint64_t out_of_range = 0;
    /// Distinct valid ids the epoch must yield (under drop: the kept samples).
    std::uint64_t expected = 0;
    /// Equal batch counts and every expected id exactly once.
    bool ok = true;
    /// The tier that served the epoch ("memory" or "file") and the slowest rank's seconds.
    std::string tier = "file";
    double seconds = 0;
};

/// Collective: the batch counts of every rank for `epoch` (no exactly-once check).
EpochReport count_epoch(const Communicator& comm, std::uint64_t epoch, std::uint64_t batches);

/// Collective: gathers the valid ids of every rank on rank 0, counts each id and broadcasts the
/// verdict, so every rank returns the same report. `ids` are this rank's valid sample ids.
/// @throws ConfigError when the epoch has more than 2^31-1 valid ids (same on every rank);
///         MpiError.
EpochReport verify_epoch(const Communicator& comm, std::uint64_t epoch,
                         const std::vector<std::int64_t>& ids, std::uint64_t batches,
                         std::uint64_t num_samples, const EpochTotals& totals, bool drop);

}  // namespace mpistage::cli
