#pragma once
// The options of `mpistage stage`, bound to StageArgs and grouped by topic in --help (internal
// to the CLI). Testing knobs work but are not listed.

#include <CLI/CLI.hpp>
#include <string>

#include "cli/args.hpp"

namespace mpistage::cli {

/// Refuses a negative value for an unsigned flag (CLI11 would wrap "-1" to 2^64-1); the message
/// names the flag (CLI11 prefixes it).
extern const CLI::Validator kNonNegative;

/// Local: adds an unsigned count option: its default shown in --help, negative values refused.
template <class T>
CLI::Option* add_count(CLI::App& cmd, const std::string& name, T& value, const std::string& desc) {
    return cmd.add_option(name, value, desc)->capture_default_str()->check(kNonNegative);
}

/// Local: adds every option of `stage` to `cmd`, bound to `a`, in the --help groups "Input",
/// "Batches and order", "Reading and devices", "Checks and output", "Fault recovery",
/// "Streams (--sqlite)" and "Benchmarking"; the testing knobs (--stage-ranks-per-node,
/// --stop-after-steps, --ids-out) are in no group, so --help does not list them.
void add_stage_options(CLI::App& cmd, StageArgs& a);

}  // namespace mpistage::cli
