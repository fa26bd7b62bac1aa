#pragma once
// Helpful command-line errors (internal to the CLI): unknown or misspelt options and commands
// reported as such with the closest valid name, and choice options that list their choices.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace mpistage::cli {

/// Pure: the candidate closest to `word` (edit distance, ignoring case, '-' and '_'), or ""
/// when none is close enough to be a plausible misspelling (or `word` is a prefix of exactly
/// one candidate: that one).
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

/// Local: scans `argv` against the commands and options of `app` before CLI11 parses it, so a
/// misspelt flag is reported as an unknown option ("unknown option '--batchsize' for 'mpistage
/// stage'; did you mean '--batch-size'?") instead of its value being taken for a file, and a
/// misspelt command as an unknown command with the closest one and the list of commands.
/// Words after "--" and values of options are not checked.
/// @throws ConfigError naming the word.
void check_command_words(const CLI::App& app, int argc, const char* const* argv);

/// Adds to every choice option of `app` (stage --format, --shuffle, --sharding, --remainder,
/// --on-corrupt, --two-phase, ...; convert --format) a check that lists its choices in --help
/// ("{none,local,global}") and refuses any other value naming the closest choice.
void add_choice_checks(CLI::App& app);

}  // namespace mpistage::cli
