#pragma once
// The options of `mpistage stage`, bound to StageArgs and grouped by topic in --help (internal
// to the CLI). Testing knobs work but are not listed.

#include <CLI/CLI.hpp>
#include <string>

#include "cli/args.hpp"

namespace mpistage::cli {

/// Refuses a negative value for an unsigned flag (CLI11 would wrap "-1" to 2^64-1).
/// A validator refusing values that start with '-'. CLI11 prefixes "--flag: " to the message
/// except for options in no --help group (`group("")`): for those pass their names
/// (`hidden_names`, e.g. "--stop-after-steps"), and the message names the first one itself.
CLI::Validator non_negative(const std::string& hidden_names = "");
/// A validator refusing anything but an optionally signed run of digits: "takes whole UNIT
/// (got 'V')" (a `--timeout 0.5` would otherwise be reported as out of range).
CLI::Validator whole_number(const std::string& unit);

/// Local: adds an unsigned count option: its default shown in --help, negative values refused.
template <class T>
CLI::Option* add_count(CLI::App& cmd, const std::string& name, T& value, const std::string& desc,
                       bool hidden = false) {
    return cmd.add_option(name, value, desc)
        ->capture_default_str()
        ->check(non_negative(hidden ? name : std::string()));
}

/// Local: adds every option of `stage` to `cmd`, bound to `a`, in the --help groups "Input",
/// "Batches and order", "Reading and devices", "Checks and output", "Fault recovery",
/// "Streams (--sqlite)" and "Benchmarking"; the testing knobs (--stage-ranks-per-node,
/// --stop-after-steps, --ids-out) are in no group, so --help does not list them.
void add_stage_options(CLI::App& cmd, StageArgs& a);

}  // namespace mpistage::cli
