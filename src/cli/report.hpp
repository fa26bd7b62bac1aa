#pragma once
// What `mpistage stage` reports: the header, the per-rank table, the epoch summary (printed by
// rank 0) and the JSON report (internal to the CLI).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/tier_report.hpp"
#include "cli/verify.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/source.hpp"

namespace mpistage::cli {

/// Source-specific counters the report shows (`Source::statistics()`, identical on every
/// rank), e.g. `skipped_records` and `skipped_bytes` under `--on-corrupt skip`.
using SourceStatistics = std::vector<SourceStatistic>;

/// The value of statistic `name`, 0 when the source does not report it.
std::uint64_t statistic(const SourceStatistics& stats, const std::string& name);

/// One rank's totals over all epochs (from its LoaderStats).
struct RankTotals {
    std::uint64_t samples = 0;
    std::uint64_t batches = 0;
    std::uint64_t bytes = 0;
    double seconds = 0;
    /// Seconds waiting in `next()` (all causes).
    double wait_seconds = 0;
    /// Seconds waiting for this rank's own reads.
    double wait_io_seconds = 0;
    /// Seconds waiting in collectives for other ranks.
    double wait_peers_seconds = 0;
    std::uint64_t records_moved = 0;
    /// CUDA device the rank staged to; −1 for the CPU.
    int device = -1;
    /// Bytes copied host → device and the device time of those copies.
    std::uint64_t h2d_bytes = 0;
    double h2d_seconds = 0;
};

/// Collective: every rank's totals (one allgather), indexed by rank, on every rank.
std::vector<RankTotals> gather_rank_totals(const Communicator& comm, const LoaderStats& stats,
                                           const StagingStats& staging);

/// Everything a finished run reports.
struct StageOutcome {
    int world_size = 1;
    std::uint64_t num_samples = 0;
    std::vector<FieldInfo> fields;
    SourceStatistics source;
    std::vector<EpochReport> epochs;
    std::vector<RankTotals> ranks;
    /// True when --verify found every epoch exactly once (always true without --verify).
    bool all_ok = true;
    /// --resume: the state the run continued from.
    std::optional<LoaderState> resume;
    /// The loader state at the end of the run (what --save-state wrote last).
    LoaderState saved;
    /// Steps after which --stop-after-steps stopped the run inside an epoch (0: it did not).
    std::uint64_t stopped_after = 0;
    /// The staging tier and how it served the epochs.
    TierSummary tier;
};

/// Local (rank 0): the first lines: sizes, options, fields, skipped records.
void print_header(const StageArgs& a, const StageOutcome& o);
/// Local (rank 0): the per-rank table, the byte balance and the epoch verdicts.
void print_summary(const StageArgs& a, const StageOutcome& o);

/// "ConfigError", "IoError", ... for an error kind.
std::string error_kind_name(ErrorKind kind);

/// Local (call on rank 0 only): checks that --json can be written later (the path is not a
/// directory, its folder exists and is writable), without creating the file.
/// @throws IoError naming the path.
void check_json_destination(const std::string& path);
/// Local (rank 0): writes the JSON report of a finished run ("status": "ok", or
/// "verify_failed" when --verify found a violation) atomically (temporary file in the same
/// folder, then rename). @throws IoError naming the path.
void write_stage_json(const StageArgs& a, const StageOutcome& o);
/// Local (rank 0): writes {"status": "error", "error": {"kind", "message"}} atomically.
/// @throws IoError naming the path.
void write_error_json(const std::string& path, int world_size, const Error& error);

}  // namespace mpistage::cli
