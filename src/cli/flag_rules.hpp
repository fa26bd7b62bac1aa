#pragma once
// Which `mpistage stage` flags apply to which input: one table for every flag, so a flag given
// for an input it does not apply to is refused by name instead of being ignored (internal to
// the CLI).

#include <string>
#include <vector>

#include "cli/args.hpp"

namespace mpistage::cli {

/// The kind of input `mpistage stage` reads.
enum class InputKind { hdf5, tfrecord, idx, sqlite };

/// "hdf5", "tfrecord", "idx" or "sqlite" (the names of --format, and "sqlite" for --sqlite).
std::string input_kind_name(InputKind kind);

/// Local: the input kind of a detected --format value ("hdf5", "tfrecord", "idx").
/// @throws ConfigError for any other text.
InputKind input_kind_of_format(const std::string& format);

/// What one stage run reads: the input kind, and whether a budget sizes its batches.
struct StageInput {
    InputKind kind = InputKind::hdf5;
    /// --batch-bytes or --batch-tokens was given a non-zero value.
    bool budget = false;
    /// A file or --sqlite database the messages name.
    std::string path;
};

/// Local: refuses every flag of `a` that was given (`StageArgs::given`) for an input it does
/// not apply to, naming the flag and the input kind. Call on every rank; run under
/// `run_agreed` so every rank throws the same error.
/// @throws ConfigError naming the flag; Error for a given flag without a rule (a flag added
///         to the command line but not to the table: a bug).
void refuse_inapplicable_flags(const StageArgs& a, const StageInput& input);

/// Long names of every stage option with a rule in the table ("files", "--epochs", ...); a
/// test checks that it covers every option of the stage command.
std::vector<std::string> ruled_stage_flags();

}  // namespace mpistage::cli
