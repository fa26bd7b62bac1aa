// The `mpistage` command line: CLI11 options bound to the option structs, and the collective
// parse that fails every rank, not one, when ranks were given different or bad arguments.
#include "cli/args.hpp"

#include "mpistage/config.hpp"
#include "mpistage/error.hpp"

namespace mpistage::cli {

const char* const kSameCommandAdvice =
    "every rank must run the same command (check the wrapper script or job file that starts "
    "the ranks)";

namespace {

// Unsigned flags must refuse "-1": CLI11 would wrap it to 2^64-1. The message names the flag
// (CLI11 prefixes it).
const CLI::Validator kNonNegative(
    [](std::string& value) -> std::string {
        const auto first = value.find_first_not_of(" \t");
        if (first != std::string::npos && value[first] == '-') {
            return "must not be negative (got '" + value + "')";
        }
        return {};
    },
    "NONNEGATIVE", "non-negative");

// An unsigned count: its default shown in --help, negative values refused.
template <class T>
CLI::Option* add_count(CLI::App& cmd, const std::string& name, T& value, const std::string& desc) {
    return cmd.add_option(name, value, desc)->capture_default_str()->check(kNonNegative);
}

void add_stage_data_options(CLI::App& cmd, StageArgs& a) {
    cmd.add_option("files", a.files,
                   "Input file(s): one HDF5 file, TFRecord files, or IDX files "
                   "(one per field)")
        ->required();
    cmd.add_option("--field", a.fields,
                   "Field (HDF5 dataset) to stage; repeat for several. "
                   "Default: all datasets aligned on dimension 0");
    cmd.add_option("--format", a.format,
                   "auto, hdf5, idx or tfrecord (auto: HDF5 signature, "
                   ".tfrecord/.gz names, IDX names; ranks must detect the same)")
        ->capture_default_str();
    cmd.add_option("--index", a.index_paths,
                   "TFRecord: DALI index file per data file "
                   "(\"<offset> <size>\" lines), validated against the data");
    cmd.add_option("--feature", a.features,
                   "TFRecord: decode tf.train.Example feature "
                   "NAME:TYPE[:SHAPE], TYPE bytes|float|int64|bytes/DTYPE (e.g. "
                   "image:bytes/uint8:28x28, label:int64). Default: raw record bytes");
    cmd.add_option("--on-corrupt", a.on_corrupt,
                   "TFRecord: error (fail on every rank naming "
                   "file and offset) or skip (drop bad records, agreed by all ranks)")
        ->capture_default_str();
}

void add_stage_plan_options(CLI::App& cmd, StageArgs& a) {
    add_count(cmd, "--batch-size,-b", a.batch_size, "Samples per batch on each rank");
    add_count(cmd, "--epochs,-e", a.epochs, "Epochs to stage");
    add_count(cmd, "--first-epoch", a.first_epoch, "Number of the first epoch");
    cmd.add_option("--shuffle", a.shuffle, "none, local (byte_range) or global (global sharding)")
        ->capture_default_str();
    cmd.add_option("--sharding", a.sharding, "byte_range or global")->capture_default_str();
    add_count(cmd, "--seed", a.seed, "Shuffle seed");
    cmd.add_option("--remainder", a.remainder, "drop, pad or mask")->capture_default_str();
    add_count(cmd, "--prefetch", a.prefetch, "Batches read ahead (ring depth)");
    add_count(cmd, "--threads", a.threads, "Background I/O threads (0 = read on the caller)");
}

void add_stage_safety_options(CLI::App& cmd, StageArgs& a) {
    cmd.add_flag("--verify", a.verify,
                 "Check that every sample is yielded exactly once per "
                 "epoch with equal batch counts; exit 1 otherwise");
    add_count(cmd, "--timeout", a.timeout_seconds,
              "Seconds a rank waits in one of the loader's "
              "collectives for the other ranks before the job is aborted with a message "
              "naming them (0 = wait forever)");
    cmd.add_flag("--verify-files", a.verify_files,
                 "Hash every byte of the dataset and compare "
                 "across ranks (reads the whole dataset once; default: boundary samples only)");
    cmd.add_option("--json", a.json,
                   "Write a JSON report to this file (rank 0; written "
                   "atomically, also on error with \"status\": \"error\")");
    cmd.add_flag("--quiet,-q", a.quiet, "Print nothing but errors");
}

void add_convert_options(CLI::App& cmd, ConvertArgs& a) {
    cmd.add_option("images", a.images, "IDX images file")->required();
    cmd.add_option("labels", a.labels, "IDX labels file")->required();
    cmd.add_option("-o,--output", a.output, "Output HDF5 file")->required();
    add_count(cmd, "--chunk-rows", a.chunk_rows,
              "Write chunked datasets with this many rows "
              "per chunk (0 = contiguous)");
    cmd.add_option("--gzip", a.gzip_level, "gzip level for chunked datasets (0 = none)")
        ->capture_default_str()
        ->check(CLI::Range(0, 9));
    cmd.add_option("--format", a.format,
                   "hdf5 (datasets images, labels) or tfrecord "
                   "(tf.train.Example: image bytes, label int64)")
        ->capture_default_str();
}

}  // namespace

std::string join_words(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : " ") + x;
    return out;
}

std::string command_name(Command c) {
    switch (c) {
        case Command::stage:
            return "stage";
        case Command::convert_idx:
            return "convert idx";
        case Command::index:
            return "index";
        case Command::none:
            break;
    }
    return "(none)";
}

CommandLine::CommandLine()
    : app_("mpistage: MPI-native staging of training data (HDF5, TFRecord, IDX) into batches") {
    app_.require_subcommand(1);
    // A flag given twice takes its last value, so wrapper scripts can append overrides.
    app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app_.set_version_flag("--version", MPISTAGE_VERSION);

    stage_cmd_ = app_.add_subcommand("stage",
                                     "Shard FILE(s) across the MPI ranks and stage "
                                     "batches");
    add_stage_data_options(*stage_cmd_, stage);
    add_stage_plan_options(*stage_cmd_, stage);
    add_stage_safety_options(*stage_cmd_, stage);
    add_stage_stream_options(*stage_cmd_, stream);  // last: it may reuse flags added above

    auto* convert_cmd = app_.add_subcommand("convert", "Convert data to a format mpistage stages");
    convert_cmd->require_subcommand(1);
    convert_idx_cmd_ = convert_cmd->add_subcommand(
        "idx",
        "IDX images + labels (.gz or plain) to HDF5 datasets 'images' and 'labels', or to "
        "TFRecord tf.train.Example (image bytes, label int64)");
    add_convert_options(*convert_idx_cmd_, convert);

    index_cmd_ = app_.add_subcommand("index",
                                     "Write DALI-compatible index files of TFRecord "
                                     "files, scanning in parallel (one FILE.idx per FILE)");
    index_cmd_->add_option("files", index.files, "TFRecord files")->required();
    index_cmd_->add_option("-o,--output", index.outputs, "Index paths (default: FILE.idx)");
}

Command CommandLine::command() const {
    if (stage_cmd_->parsed()) return Command::stage;
    if (convert_idx_cmd_->parsed()) return Command::convert_idx;
    if (index_cmd_->parsed()) return Command::index;
    return Command::none;
}

Command CommandLine::parse_agreed(const Communicator& comm, int argc, char** argv) {
    // Parse on every rank, then agree: a parse error on one rank (a wrapper script passing it
    // other flags) fails every rank instead of hanging the others.
    bool printed = false;  // --help or --version
    agree_or_throw(comm, capture([&] {
                       try {
                           app_.parse(argc, argv);
                       } catch (const CLI::Success& e) {  // --help, --help-all, --version
                           printed = true;
                           if (comm.rank() == 0) app_.exit(e);
                       } catch (const CLI::ParseError& e) {
                           throw ConfigError(std::string(e.what()) + " (see --help)");
                       }
                   }));
    // The command decides every collective that follows: it must be the same everywhere.
    require_same(comm,
                 {{"--help/--version", printed ? "given" : "not given"},
                  {"the command", printed ? "(help)" : command_name(command())}},
                 "ranks were given different arguments", kSameCommandAdvice);
    return printed ? Command::none : command();
}

std::vector<NamedValue> stage_argument_values(const StageArgs& a) {
    return {
        {"FILE", join_words(a.files)},
        {"--field", join_words(a.fields)},
        {"--format", a.format},
        {"--batch-size", std::to_string(a.batch_size)},
        {"--epochs", std::to_string(a.epochs)},
        {"--first-epoch", std::to_string(a.first_epoch)},
        {"--shuffle", a.shuffle},
        {"--sharding", a.sharding},
        {"--seed", std::to_string(a.seed)},
        {"--remainder", a.remainder},
        {"--verify", a.verify ? "on" : "off"},
        {"--timeout", std::to_string(a.timeout_seconds)},
        {"--verify-files", a.verify_files ? "on" : "off"},
        {"--json", a.json.empty() ? "(none)" : "(given)"},
        {"--index", join_words(a.index_paths)},
        {"--feature", join_words(a.features)},
        {"--on-corrupt", a.on_corrupt},
    };
}

}  // namespace mpistage::cli
