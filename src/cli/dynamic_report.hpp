#pragma once
// What `mpistage stage FILE --batch-bytes N` reports: steps, samples per batch, oversize batches
// and padding waste per epoch, per-rank totals, the exactly-once verdict (internal to the CLI).

#include <cstdint>
#include <string>
#include <vector>

#include "cli/verify.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"

namespace mpistage::cli {

/// One epoch of a dynamic run: the (agreed) verify/count report and the plan's totals.
struct DynamicEpochReport {
    EpochReport base;
    /// Steps of the epoch (equal on every rank), real batches and padding steps over all ranks.
    std::uint64_t steps = 0;
    std::uint64_t batches = 0;
    std::uint64_t padding_steps = 0;
    std::uint64_t oversize = 0;
    std::uint64_t min_samples = 0;
    std::uint64_t max_samples = 0;
    double mean_samples = 0;
    double padding_waste = 0;
    double unbucketed_padding_waste = 0;
};

/// One rank's totals over all epochs.
struct DynamicRankTotals {
    std::uint64_t samples = 0;
    std::uint64_t batches = 0;
    std::uint64_t padding_steps = 0;
    std::uint64_t bytes = 0;
    std::uint64_t oversize = 0;
    /// Fewest and most samples in one of its real batches (0 when it had none).
    std::uint64_t min_samples = 0;
    std::uint64_t max_samples = 0;
    double seconds = 0;
};

/// Everything a finished dynamic run reports.
struct DynamicOutcome {
    int world_size = 1;
    std::uint64_t num_samples = 0;
    BatchBudget batching;
    std::string unit;  ///< "bytes" or "tokens" (padding waste unit)
    std::vector<DynamicEpochReport> epochs;
    std::vector<DynamicRankTotals> ranks;
    bool all_ok = true;
};

/// The budget plan's totals of an epoch (identical on every rank) into `r`.
void add_plan_totals(DynamicEpochReport& r, const EpochPlan& p);

/// Collective: every rank's totals, indexed by rank, on every rank (one allgather).
std::vector<DynamicRankTotals> gather_dynamic_totals(const Communicator& comm,
                                                     const DynamicRankTotals& mine);

/// Local (rank 0): the per-rank table, the epochs' steps, batch sizes, oversize batches,
/// padding waste, and with `verify` the verdict ("exactly-once: OK" or "... FAILED (...)").
void print_dynamic_report(const DynamicOutcome& o, bool verify);

/// Local (rank 0): the JSON report (README, "The JSON report"), written atomically.
/// @throws IoError naming the path.
void write_dynamic_json(const std::string& path, const DynamicOutcome& o, bool verify,
                        const std::string& shuffle, const std::string& sharding);

}  // namespace mpistage::cli
