// The stream flags of `mpistage stage` (see stream_args.hpp).
#include "cli/stream_args.hpp"

namespace mpistage::cli {

namespace {

// The flags file staging may register too: added here only when nobody else did.
void add_shared_flag(CLI::App& cmd, const std::string& name, const std::string& desc) {
    if (cmd.get_option_no_throw(name) == nullptr) cmd.add_option(name, desc);
}

}  // namespace

std::string StreamStageArgs::flag(const std::string& name) const {
    const CLI::Option* o = cmd ? cmd->get_option_no_throw(name) : nullptr;
    if (o == nullptr || o->count() == 0) return {};
    return o->as<std::string>();
}

void add_stage_stream_options(CLI::App& cmd, StreamStageArgs& a) {
    a.cmd = &cmd;
    CLI::Option* files = cmd.get_option("files");
    files->required(false);
    cmd.add_option("--sqlite", a.sqlite,
                   "Stage the rows of a SQLite database query instead of FILE(s) (a stream: "
                   "rows sharded by --shard, equal steps on every rank)")
        ->excludes(files);
    cmd.add_option("--query", a.query, "--sqlite: the SELECT statement (rows = samples)");
    cmd.add_option("--shard", a.shard,
                   "--sqlite: chunk (chunks of --chunk-rows rows round-robin over ranks) or "
                   "hash:COLUMN (rows to rank hash(COLUMN) mod W, forwarded with MPI)")
        ->capture_default_str();
    cmd.add_option("--chunk-rows", a.chunk_rows, "--sqlite: rows per cursor chunk")
        ->capture_default_str();
    cmd.add_option("--batch-bytes", a.batch_bytes,
                   "Byte budget of a batch (--sqlite rows, or FILE samples: as many as fit; a "
                   "larger single one is a batch of its own, reported as oversize); 0 = "
                   "--batch-size samples")
        ->capture_default_str();
    cmd.add_option("--max-batch-samples", a.max_batch_samples,
                   "With --batch-bytes (or --batch-tokens): most rows/samples in one batch")
        ->capture_default_str();
    cmd.add_option("--on-dry", a.on_dry,
                   "--sqlite: rebalance (ranks with rows left share them with dry ranks) or "
                   "mask (dry ranks yield padding batches)")
        ->capture_default_str();
    cmd.add_option("--ids-out", a.ids_out,
                   "--sqlite: rank 0 writes the position (in the query result) of every row "
                   "delivered, one per line (for checks)");
    add_shared_flag(cmd, "--save-state", "Write the loader state to this file at the end");
    add_shared_flag(cmd, "--stop-after-steps", "Stop after this many steps (then --save-state)");
    add_shared_flag(cmd, "--resume", "Continue from a state written by --save-state");
    cmd.parse_complete_callback([&a, files] {
        if (a.sqlite.empty() && files->count() == 0) {
            throw CLI::RequiredError("FILE(s) or --sqlite DB");
        }
        if (!a.sqlite.empty() && a.query.empty()) {
            throw CLI::RequiredError("--query (with --sqlite)");
        }
    });
}

}  // namespace mpistage::cli
