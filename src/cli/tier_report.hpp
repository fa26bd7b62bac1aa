#pragma once
// What `mpistage stage` reports about the staging tier: which tier served each epoch, how many
// bytes were staged and how long the staging read took (internal to the CLI).

#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "cli/verify.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"

namespace mpistage::cli {

/// The tier of a run, identical on every rank after `gather_tier`.
struct TierSummary {
    std::string stage = "none";          ///< the --stage option
    std::string tier = "file";           ///< "memory" or "file"
    std::string note;                    ///< rank 0's LoaderStats::tier_note
    std::uint64_t staged_bytes = 0;      ///< sum over ranks
    std::uint64_t staged_bytes_max = 0;  ///< largest rank
    double stage_seconds = 0;            ///< slowest rank's staging read
    double populate_seconds = 0;         ///< slowest rank's mapping of its pages for writing
    double read_seconds = 0;             ///< slowest rank's read of the files into the tier
    double map_node_seconds = 0;         ///< slowest rank's mapping of the node's segments
    std::string read_method;             ///< "mapped", "independent" or "collective"
    std::string read_note;               ///< why --stage-read auto copied (agreed), else empty
    /// --two-phase as given (off, on or auto), whether the epochs read in two phases
    /// (LoaderStats::two_phase), rank 0's note and, with auto, the predicted step seconds
    /// of the plain path and of two-phase reads (0: not measured).
    std::string two_phase_option = "off";
    bool two_phase = false;
    std::string two_phase_note;
    std::string shuffle_note;  // Shuffle::chunks: sizes, and auto's choice
    double two_phase_plain_step_seconds = 0;
    double two_phase_step_seconds = 0;
};

/// Collective (allreduces and broadcasts): the tier summary of `stats` on every rank (the
/// two-phase fields but `two_phase_option`, which the caller sets).
TierSummary gather_tier(const Communicator& comm, const std::string& stage,
                        const LoaderStats& stats);

/// Collective (one allreduce): records in `r` the tier that served the epoch and the slowest
/// rank's wall time `elapsed` for it.
void note_epoch_tier(const Communicator& comm, const LoaderStats& stats,
                     std::chrono::duration<double> elapsed, EpochReport& r);

/// Local (rank 0): "stage: ..." and one line per epoch: tier and seconds.
void print_tier(const TierSummary& t, const std::vector<EpochReport>& epochs);

/// The "stage" object of the JSON report.
nlohmann::json tier_json(const TierSummary& t);

}  // namespace mpistage::cli
