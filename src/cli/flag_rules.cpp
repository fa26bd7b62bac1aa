// The applicability table of the `mpistage stage` flags (see flag_rules.hpp).
#include "cli/flag_rules.hpp"

#include <algorithm>

#include "mpistage/error.hpp"

namespace mpistage::cli {

namespace {

using Applies = bool (*)(const StageInput&, const StageArgs&);

bool files(const StageInput& in, const StageArgs&) {
    return in.kind != InputKind::sqlite;
}
bool fixed_files(const StageInput& in, const StageArgs&) {
    return in.kind != InputKind::sqlite && !in.budget;
}
bool any_input(const StageInput&, const StageArgs&) {
    return true;
}
bool fixed_batches(const StageInput& in, const StageArgs&) {
    return !in.budget;
}
bool budget_batches(const StageInput& in, const StageArgs&) {
    return in.budget;
}
bool budget_files(const StageInput& in, const StageArgs&) {
    return in.budget && in.kind != InputKind::sqlite;
}
bool token_budget(const StageInput&, const StageArgs& a) {
    return a.batch_tokens > 0;
}
bool tfrecord(const StageInput& in, const StageArgs&) {
    return in.kind == InputKind::tfrecord;
}
bool named_fields(const StageInput& in, const StageArgs&) {
    return in.kind == InputKind::hdf5 || in.kind == InputKind::idx;
}
bool sqlite(const StageInput& in, const StageArgs&) {
    return in.kind == InputKind::sqlite;
}

/// One flag: where it applies, and what to do instead when it does not.
struct Rule {
    const char* flag;
    Applies applies;
    const char* advice;
};

constexpr const char* kStreamOnly = "it is for --sqlite input";
constexpr const char* kFileOnly =
    "it is for FILE input (streams have no memory tier or file verification)";

// Every option of the stage command, in --help order. A flag added to args.cpp without a row
// here fails every run that gives it, and the unit test that compares the two lists.
constexpr Rule kRules[] = {
    {"--help", any_input, ""},
    {"files", files, "give FILE(s) or --sqlite DB, not both"},
    {"--field", named_fields,
     "it names HDF5 datasets or IDX files' fields; for TFRecord name tf.train.Example features "
     "with --feature NAME:TYPE[:SHAPE], for --sqlite select the columns in --query"},
    {"--format", files, "the input is a --sqlite database"},
    {"--index", tfrecord, "it is for TFRecord input"},
    {"--feature", tfrecord, "it is for TFRecord input"},
    {"--on-corrupt", tfrecord, "it is for TFRecord input"},
    {"--batch-size", fixed_batches, "the budget decides the batches; use --max-batch-samples"},
    {"--epochs", any_input, ""},
    {"--first-epoch", any_input, ""},
    {"--shuffle", files,
     "rows come in query order; for a shuffled order that every sharding accepts, order by a "
     "fixed pseudo-random expression of a key in --query, e.g. ORDER BY (id * 1103515245 + 7) "
     "% 2147483648 (random() is refused: not deterministic)"},
    {"--sharding", files, "use --shard chunk|hash:COLUMN"},
    {"--seed", files, "rows come in query order"},
    {"--remainder", fixed_files,
     "budget batches mask the steps of ranks with no batch left; "
     "streams use --on-dry"},
    {"--prefetch", any_input, ""},
    {"--threads", any_input, ""},
    {"--verify", any_input, ""},
    {"--timeout", any_input, ""},
    {"--verify-files", files, kFileOnly},
    {"--json", any_input, ""},
    {"--quiet", any_input, ""},
    {"--progress", any_input, ""},
    {"--progress-every", any_input, ""},
    {"--save-state", any_input, ""},
    {"--save-every", any_input, ""},
    {"--stop-after-steps", any_input, ""},
    {"--stop-signals", any_input, ""},
    {"--stop-marker", any_input, ""},
    {"--resume", any_input, ""},
    {"--accept-legacy-state", files,
     "it lets a FILE input's loader state without a consumed-id digest resume"},
    {"--fingerprint", files,
     "it sets the dataset fingerprint of the loader's state (a stream state has none)"},
    {"--balance-steps", fixed_files, "it balances fixed-size global batches of FILE input"},
    {"--chunk-samples", files, "it sizes the chunks of --shuffle chunks (FILE input)"},
    {"--window-chunks", files, "it sizes the windows of --shuffle chunks (FILE input)"},
    {"--compute-ms", any_input, ""},
    {"--compute-us", any_input, ""},
    {"--device", any_input, ""},
    {"--stage", files, kFileOnly},
    {"--stage-budget", files, kFileOnly},
    {"--stage-ranks-per-node", files, kFileOnly},
    {"--stage-read", files, kFileOnly},
    {"--two-phase", fixed_files,
     "it exchanges fixed-size global batches of FILE input (not budget batches or streams)"},
    {"--batch-bytes", any_input, ""},
    {"--batch-tokens", any_input, ""},
    {"--max-batch-samples", budget_batches,
     "it limits budget batches: give --batch-bytes or "
     "--batch-tokens (fixed batches: --batch-size)"},
    {"--token-field", token_budget, "it names the field --batch-tokens counts"},
    {"--bucket-window", budget_files, "it sorts budget batches of FILE input"},
    {"--sqlite", sqlite, ""},
    {"--query", sqlite, kStreamOnly},
    {"--shard", sqlite, kStreamOnly},
    {"--chunk-rows", sqlite, kStreamOnly},
    {"--on-dry", sqlite, kStreamOnly},
    {"--ids-out", sqlite, kStreamOnly},
    {"--column", sqlite, kStreamOnly},
    {"--nulls", sqlite, kStreamOnly},
};

std::string describe(const StageInput& in, const StageArgs& a) {
    std::string what = input_kind_name(in.kind) + " input ('" + in.path + "'";
    if (in.kind != InputKind::sqlite) {
        what += a.format == "auto" ? " detected as " : " given as --format ";
        what += input_kind_name(in.kind);
    }
    return what + ")";
}

}  // namespace

std::string input_kind_name(InputKind kind) {
    switch (kind) {
        case InputKind::hdf5:
            return "hdf5";
        case InputKind::tfrecord:
            return "tfrecord";
        case InputKind::idx:
            return "idx";
        case InputKind::sqlite:
            break;
    }
    return "sqlite";
}

InputKind input_kind_of_format(const std::string& format) {
    for (InputKind k : {InputKind::hdf5, InputKind::tfrecord, InputKind::idx}) {
        if (input_kind_name(k) == format) return k;
    }
    throw ConfigError("stage: unknown input format '" + format + "'");
}

void refuse_inapplicable_flags(const StageArgs& a, const StageInput& input) {
    std::string refused;  // every flag that does not apply, each with its reason
    for (const std::string& flag : a.given) {
        const auto rule = std::find_if(std::begin(kRules), std::end(kRules),
                                       [&](const Rule& r) { return flag == r.flag; });
        if (rule == std::end(kRules)) {
            throw Error("stage: internal error: the flag " + flag +
                        " has no rule in cli/flag_rules.cpp (taken effect or refused?)");
        }
        if (rule->applies(input, a)) continue;
        const std::string name = flag == "files" ? "FILE" : flag;
        StageInput fixed = input;
        fixed.budget = false;
        refused += refused.empty() ? "stage: " : "; and ";
        if (input.budget && rule->applies(fixed, a)) {  // fixed batches of this input only
            refused += name + " does not combine with --batch-bytes/--batch-tokens (budget " +
                       "batches of " + describe(input, a) + "): " + rule->advice;
        } else {
            refused += name + " does not apply to " + describe(input, a) + ": " + rule->advice;
        }
    }
    if (!refused.empty()) throw ConfigError(refused);
}

std::vector<std::string> ruled_stage_flags() {
    std::vector<std::string> out;
    for (const Rule& r : kRules) out.emplace_back(r.flag);
    return out;
}

}  // namespace mpistage::cli
