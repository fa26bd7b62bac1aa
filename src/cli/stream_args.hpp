#pragma once
// `mpistage stage --sqlite DB --query SQL --shard chunk|hash:COLUMN`: the options of staging a
// database query as a stream (internal to the CLI). Kept apart from StageArgs so file staging
// and stream staging evolve independently.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"

namespace mpistage::cli {

struct StageArgs;

/// The stream flags of `mpistage stage`.
struct StreamStageArgs {
    std::string sqlite;
    std::string query;
    std::string shard = "chunk";
    std::uint64_t chunk_rows = 256;
    std::uint64_t batch_bytes = 0;
    /// Largest samples per batch under --batch-bytes (0: --batch-size).
    std::uint64_t max_batch_samples = 4096;
    std::string on_dry = "rebalance";
    std::string ids_out;
    /// The stage subcommand: `--save-state`, `--stop-after-steps` and `--resume` are read from
    /// it by name, whoever registered them (file staging has the same flags).
    const CLI::App* cmd = nullptr;

    /// True when --sqlite was given (the stage command then stages the query).
    bool active() const { return !sqlite.empty(); }
    /// The value of a flag of the stage command, "" when not given.
    std::string flag(const std::string& name) const;
};

/// Adds --sqlite, --query, --shard, --chunk-rows, --batch-bytes, --max-batch-samples,
/// --on-dry, --ids-out, and (unless already present) --save-state, --stop-after-steps,
/// --resume to the stage command; FILE becomes optional when --sqlite is given.
void add_stage_stream_options(CLI::App& cmd, StreamStageArgs& a);

/// Collective: `mpistage stage --sqlite ...`. Returns 0, or 1 when --verify found a violation.
/// @throws Error subclasses, identical on every rank.
int run_stream_stage(Communicator& comm, const StreamStageArgs& s, const StageArgs& a);

}  // namespace mpistage::cli
