#pragma once
// What `mpistage stage` reports, for every input (files, budget batches, streams): the header,
// the per-rank table, the epoch summary (printed by rank 0) and the JSON report (internal to
// the CLI). One schema: README, "The JSON report".

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/tier_report.hpp"
#include "cli/verify.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/source.hpp"

namespace mpistage::cli {

/// Source-specific counters the report shows (`Source::statistics()`, identical on every
/// rank), e.g. `skipped_records` and `skipped_bytes` under `--on-corrupt skip`.
using SourceStatistics = std::vector<SourceStatistic>;

/// The value of statistic `name`, 0 when the source does not report it.
std::uint64_t statistic(const SourceStatistics& stats, const std::string& name);

/// One rank's totals over all epochs (from its loader's stats).
struct RankTotals {
    std::uint64_t samples = 0;
    std::uint64_t batches = 0;
    /// Slots of its batches flagged padding (valid = 0).
    std::uint64_t padding_slots = 0;
    std::uint64_t bytes = 0;
    double seconds = 0;
    /// Seconds waiting in `next()` (all causes), for this rank's own reads (files with fixed
    /// batches; 0 otherwise), and in collectives for other ranks (files with fixed batches,
    /// and streams: the stream loader's agreements, routing and rebalancing).
    double wait_seconds = 0;
    double wait_io_seconds = 0;
    double wait_peers_seconds = 0;
    /// Records this rank moved to or from others: the skew correction of files, the rows a
    /// stream sent to other ranks (hash routing, rebalancing).
    std::uint64_t records_moved = 0;
    /// Batches of one sample over the budget.
    std::uint64_t oversize = 0;
    /// CUDA device the rank staged to; −1 for the CPU.
    int device = -1;
    /// Bytes copied host → device and the device time of those copies.
    std::uint64_t h2d_bytes = 0;
    double h2d_seconds = 0;
    /// CPU seconds (user + system, all threads) of the rank's process during the epochs'
    /// loops: what the loop cost the rank, whatever share of a core it got.
    double cpu_seconds = 0;
    /// `--shuffle chunks` from the files (LoaderStats::read_ahead): chunks read, the most bytes
    /// held at once, chunks read over the budget, the most reads in flight, waits for chunks.
    std::uint64_t read_ahead_chunks = 0;
    std::uint64_t read_ahead_peak_bytes = 0;
    std::uint64_t read_ahead_over_budget = 0;
    std::uint64_t read_ahead_readers = 0;
    double read_ahead_wait_seconds = 0;
};

/// Collective (one allgather through `comm`): every rank's totals, indexed by rank.
std::vector<RankTotals> gather_rank_totals(const Communicator& comm, const RankTotals& mine);

/// Collective (one allgather through `comm`): every rank's times and waits in one epoch (the
/// difference of its totals `before` and `after` it; `seconds` its duration on this rank) into
/// `r.ranks`, and the rank that made the others wait the most into `r.waited_on_rank`.
void note_epoch_ranks(const Communicator& comm, const RankTotals& before, const RankTotals& after,
                      double seconds, EpochReport& r);

/// Collective (one gatherv through `comm`): on rank 0 every rank's host name
/// (MPI_Get_processor_name), indexed by rank; empty on the other ranks.
std::vector<std::string> gather_host_names(const Communicator& comm);

/// Everything a finished run reports.
struct StageOutcome {
    int world_size = 1;
    /// Rank 0: the host of each rank (gather_host_names).
    std::vector<std::string> hosts;
    /// "hdf5", "tfrecord", "idx" or "sqlite", and "fixed" or "budget".
    std::string input_kind;
    std::string batching = "fixed";
    /// FILE(s), or the --sqlite database.
    std::vector<std::string> paths;
    /// Samples of the dataset (files) or rows of the query (streams, an independent COUNT(*)).
    std::uint64_t num_samples = 0;
    /// Most samples in one batch (fixed batches: every batch has this many slots).
    std::uint64_t batch_size = 0;
    /// How a step is filled when a rank has too few samples (--remainder, "mask" for budget
    /// batches, --on-dry for streams), the order and the sharding (--shard for streams).
    std::string remainder;
    std::string shuffle;
    std::string sharding;
    std::vector<FieldInfo> fields;
    SourceStatistics source;
    /// What the source decided on its own (Source::notes), printed and in --json.
    std::vector<std::string> source_notes;
    std::vector<EpochReport> epochs;
    std::vector<RankTotals> ranks;
    /// True when --verify found every epoch exactly once (always true without --verify).
    bool all_ok = true;
    /// --resume: the state the run continued from (its JSON, "" when not resumed) and a line
    /// saying where it continues.
    std::string resumed_from;
    std::string resume_note;
    /// The loader state at the end of the run (what --save-state wrote last) as JSON, and a
    /// short text of where it stands ("epoch 1, step 20, 640 samples consumed").
    std::string state;
    std::string state_note;
    /// Steps after which --stop-after-steps stopped the run inside an epoch (0: it did not).
    std::uint64_t stopped_after = 0;
    /// --stop-signals installed for this run ("USR1", ...), and the one that stopped it ("":
    /// none did; agreed over ranks, which may not all have got it).
    std::vector<std::string> stop_signals;
    std::string stopped_by_signal;
    /// The staging tier and how it served the epochs.
    TierSummary tier;
    /// Budget batches: the budget ("batch_bytes", "batch_tokens", "max_batch_samples",
    /// "bucket_window", "waste_unit"); streams: "sqlite", "query", "shard", "chunk_rows",
    /// "on_dry", "extra_rounds". Null when the run has none.
    nlohmann::json budget;
    nlohmann::json stream;
    /// The options the loader ran with, read back from it (e.g. "prefetch", "seed",
    /// "shuffle", "chunk_size").
    nlohmann::json options;
    /// --save-state writes made (every --save-every steps and at the end).
    std::uint64_t state_saves = 0;
};

/// Local (rank 0): the first lines: input, sizes, options, fields, skipped records.
void print_header(const StageArgs& a, const StageOutcome& o);
/// Local (rank 0): the per-rank table, the byte balance, the epochs and their verdicts.
void print_summary(const StageArgs& a, const StageOutcome& o);

/// "ConfigError", "IoError", ... for an error kind.
std::string error_kind_name(ErrorKind kind);

/// Local (call on rank 0 only): checks that --json can be written later (the path is not a
/// directory, its folder exists and is writable), without creating the file.
/// @throws IoError naming the path.
void check_json_destination(const std::string& path);
/// Local (rank 0): writes the JSON report of a finished run ("status": "ok", or
/// "verify_failed" when --verify found a violation) atomically (cli/atomic_file).
/// @throws IoError naming the path.
void write_stage_json(const StageArgs& a, const StageOutcome& o);
/// Local (rank 0): writes {"status": "error", "error": {"kind", "message"}} atomically.
/// @throws IoError naming the path.
void write_error_json(const std::string& path, int world_size, const Error& error);

}  // namespace mpistage::cli
