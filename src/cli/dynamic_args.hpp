#pragma once
// `mpistage stage FILE --batch-bytes N` / `--batch-tokens N --token-field F`: dynamic batching of
// file inputs (internal to the CLI). --batch-bytes and --max-batch-samples are the stream
// flags (cli/stream_args.hpp), shared by files and --sqlite; the flags here are files only.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "mpistage/comm.hpp"

namespace mpistage::cli {

struct StageArgs;
struct StreamStageArgs;

/// The dynamic-batching flags of `mpistage stage` for FILE input.
struct DynamicStageArgs {
    std::uint64_t batch_tokens = 0;
    /// Name of the ragged field whose length counts as tokens ("" = the only ragged field).
    std::string token_field;
    /// Batches per length-sorting window (0 or 1 = no bucketing).
    std::uint64_t bucket_window = 0;
    /// The stage subcommand (to tell whether a flag was given).
    const CLI::App* cmd = nullptr;

    /// True when FILE input is to be batched by a budget (--batch-bytes or --batch-tokens).
    bool active(const StreamStageArgs& s) const;
    /// True when the flag `name` of the stage command was given.
    bool given(const std::string& name) const;
};

/// Adds --batch-tokens, --token-field and --bucket-window (FILE input only) to the stage
/// command. Call after `add_stage_stream_options` (which adds --batch-bytes).
void add_stage_dynamic_options(CLI::App& cmd, DynamicStageArgs& d);

/// Collective: `mpistage stage FILE --batch-bytes N` (or --batch-tokens). Returns 0, or 1 when
/// --verify found a violation. @throws Error subclasses, identical on every rank (ConfigError
/// for flags that do not combine with dynamic batching).
int run_dynamic_stage(Communicator& comm, const DynamicStageArgs& d, const StreamStageArgs& s,
                      const StageArgs& a);

}  // namespace mpistage::cli
