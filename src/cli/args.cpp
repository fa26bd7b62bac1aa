// The `mpistage` command line: CLI11 options bound to the option structs, and the collective
// parse that fails every rank, not one, when ranks were given different or bad arguments.
#include "cli/args.hpp"

#include <algorithm>

#include "cli/suggest.hpp"
#include "cli/version.hpp"
#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/config.hpp"
#include "mpistage/device.hpp"
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
              "naming them (0 = wait forever)")
        ->check(CLI::Range(std::int64_t{0}, static_cast<std::int64_t>(kMaxTimeout.count())));
    cmd.add_flag("--verify-files", a.verify_files,
                 "Hash every byte of the dataset and compare "
                 "across ranks (reads the whole dataset once; default: boundary samples only)");
    cmd.add_option("--json", a.json,
                   "Write a JSON report to this file (rank 0; written "
                   "atomically, also on error with \"status\": \"error\")");
    cmd.add_flag("--quiet,-q", a.quiet, "Print nothing but errors");
}

void add_stage_resume_options(CLI::App& cmd, StageArgs& a) {
    cmd.add_option("--save-state", a.save_state,
                   "Write the loader state (JSON, a few hundred bytes) to this file: rank 0 "
                   "writes it atomically every --save-every steps and at the end; with --verify "
                   "also FILE.ids, the ids consumed so far in the state's epoch");
    add_count(cmd, "--save-every", a.save_every,
              "Steps between two --save-state writes (0 = only at the end)");
    add_count(cmd, "--stop-after-steps", a.stop_after_steps,
              "Stop after this many steps of this run, as if the job were interrupted "
              "(0 = run every epoch)");
    cmd.add_option("--stop-signals", a.stop_signals,
                   "Signals (comma-separated, e.g. USR1,TERM, or none) that stop FILE input at "
                   "the next agreed step on every rank (also when only some ranks get one): "
                   "the state is saved (--save-state) and the run exits with code 75; resume "
                   "with --resume")
        ->capture_default_str();
    cmd.add_option("--resume", a.resume,
                   "Continue from a --save-state file: the rest of its epoch, then the epochs up "
                   "to --first-epoch + --epochs. Global sharding resumes at any number of "
                   "ranks, byte_range at the same number");
    cmd.add_option("--fingerprint", a.fingerprint,
                   "What the saved state's dataset fingerprint covers: sampled (1024 spread "
                   "samples and every sample's size; reads about 1026 samples) or full (also "
                   "every byte, hashed in parallel: reads the dataset once). A --resume checks "
                   "the dataset at the level its state was saved with")
        ->capture_default_str()
        ->check(CLI::IsMember({"sampled", "full"}));
    cmd.add_flag("--balance-steps", a.balance_steps,
                 "Global sharding: inside each global batch, assign samples to ranks so bytes "
                 "per rank per step are balanced (equal counts, same global batch)");
    add_count(cmd, "--compute-ms", a.compute_ms,
              "Emulated compute per step in milliseconds (sleeps after each batch, like a "
              "training step)");
    add_count(cmd, "--compute-us", a.compute_us,
              "Emulated compute per step in microseconds, added to --compute-ms (for "
              "sub-millisecond steps)");
}

void add_stage_device_options(CLI::App& cmd, StageArgs& a) {
    const CLI::Validator device_form(
        [](std::string& value) -> std::string {
            try {
                (void)parse_device(value);
            } catch (const ConfigError& e) {
                return e.what();
            }
            return {};
        },
        "auto|cpu|cuda[:N]", "device");
    cmd.add_option("--device", a.device,
                   "Where batches go: auto (CUDA device node-local rank mod visible devices, "
                   "else the CPU, said in one line), cpu, cuda or cuda:N")
        ->capture_default_str()
        ->check(device_form);
}

void add_stage_tier_options(CLI::App& cmd, StageArgs& a) {
    cmd.add_option("--stage", a.stage,
                   "none (read the files every epoch), memory (read each rank's shard once into "
                   "node shared memory, serve every epoch from it) or auto (memory when it fits "
                   "--stage-budget)")
        ->capture_default_str();
    add_count(cmd, "--stage-budget", a.stage_budget,
              "Bytes per rank for the staged shard plus the prefetch ring (0 = half of the "
              "node's memory divided among its ranks)");
    add_count(cmd, "--stage-ranks-per-node", a.stage_ranks_per_node,
              "Testing: treat groups of this many ranks as nodes, so the memory tier's "
              "cross-node MPI_Get path runs on one machine (0 = real nodes)");
    cmd.add_flag("--two-phase", a.two_phase,
                 "Global sharding without staging: each rank reads only its contiguous slab's "
                 "samples of a step (sorted, coalesced) and one exchange per step routes them "
                 "to the ranks that consume them");
}

void add_stage_budget_options(CLI::App& cmd, StageArgs& a) {
    add_count(cmd, "--batch-bytes", a.batch_bytes,
              "Byte budget of a batch (FILE samples or --sqlite rows: as many as fit; a larger "
              "single one is a batch of its own, reported as oversize); 0 = --batch-size "
              "samples");
    add_count(cmd, "--batch-tokens", a.batch_tokens,
              "Token budget of a batch (samples x longest sample of --token-field, in "
              "elements); 0 = off");
    add_count(cmd, "--max-batch-samples", a.max_batch_samples,
              "With --batch-bytes or --batch-tokens: most samples (rows) in one batch");
    cmd.add_option("--token-field", a.token_field,
                   "With --batch-tokens: the ragged field whose length counts as tokens "
                   "(default: the input's only ragged field)");
    add_count(cmd, "--bucket-window", a.bucket_window,
              "FILE input with --batch-bytes/--batch-tokens: sort the samples of this many "
              "consecutive batches by length and batch them again (less padding); 0 = off");
}

void add_stage_stream_options(CLI::App& cmd, StageArgs& a) {
    CLI::Option* files = cmd.get_option("files");
    files->required(false);
    cmd.add_option("--sqlite", a.sqlite,
                   "Stage the rows of a SQLite database query instead of FILE(s) (a stream: "
                   "rows sharded by --shard, equal steps on every rank; each epoch runs the "
                   "query again)");
    cmd.add_option("--query", a.query, "--sqlite: the SELECT statement (rows = samples)");
    cmd.add_option("--shard", a.shard,
                   "--sqlite: chunk (chunks of --chunk-rows rows round-robin over ranks) or "
                   "hash:COLUMN (rows to rank hash(COLUMN) mod W, forwarded with MPI) or "
                   "range:COLUMN (an INTEGER column's span cut into 64 key ranges pushed into "
                   "the SQL, whole ranges to ranks: each rank reads only its rows)")
        ->capture_default_str();
    add_count(cmd, "--chunk-rows", a.chunk_rows, "--sqlite: rows per cursor chunk");
    cmd.add_option("--on-dry", a.on_dry,
                   "--sqlite: rebalance (ranks with rows left share them with dry ranks) or "
                   "mask (dry ranks yield padding batches)")
        ->capture_default_str();
    cmd.add_option("--ids-out", a.ids_out,
                   "--sqlite: rank 0 writes the position (in the query result) of every row "
                   "delivered, one per line (for checks)");
    cmd.add_option("--column", a.columns,
                   "--sqlite: the type of a result column, NAME:TYPE[:convert] with TYPE int64, "
                   "float64, text or blob (default: from its declared type; expressions are "
                   "text). A value of another storage class is an error naming its row, unless "
                   ":convert asks for SQLite's own conversion. Repeatable");
    cmd.add_option("--nulls", a.nulls,
                   "--sqlite: what a NULL becomes: error (names its row and column), mask (each "
                   "column gets a NAME.valid uint8 field, 0 for NULL) or fill:VALUE (numbers "
                   "VALUE, text and blobs empty)")
        ->capture_default_str();
    cmd.parse_complete_callback([&a, files] {
        if (a.sqlite.empty() && files->count() == 0) {
            throw CLI::RequiredError("FILE(s) or --sqlite DB");
        }
        if (!a.sqlite.empty() && a.query.empty()) {
            throw CLI::RequiredError("--query (with --sqlite)");
        }
    });
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
    app_.set_version_flag("--version", version_text,
                          "Print the version and the build features (MPI, HDF5, torch, CUDA)");

    stage_cmd_ = app_.add_subcommand("stage",
                                     "Shard FILE(s) or a --sqlite query across the MPI ranks "
                                     "and stage batches (fixed size or a --batch-bytes/"
                                     "--batch-tokens budget)");
    add_stage_data_options(*stage_cmd_, stage);
    add_stage_plan_options(*stage_cmd_, stage);
    add_stage_safety_options(*stage_cmd_, stage);
    add_stage_resume_options(*stage_cmd_, stage);
    add_stage_device_options(*stage_cmd_, stage);
    add_stage_tier_options(*stage_cmd_, stage);
    add_stage_budget_options(*stage_cmd_, stage);
    add_stage_stream_options(*stage_cmd_, stage);
    stage_cmd_->footer(
        "Exit codes: 0 done; 1 --verify found a violation; 2 an error (the same on every rank); "
        "3 an error not agreed between ranks (job aborted); 70 the watchdog ended the job; 75 "
        "stopped by a --stop-signals signal at an agreed step (state saved with --save-state; "
        "continue with --resume).");

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
    add_choice_checks(app_);
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
                           check_command_words(app_, argc, argv);
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
    if (!printed && command() == Command::stage) {
        for (const CLI::Option* o : stage_cmd_->get_options()) {
            if (o->count() > 0) stage.given.push_back(o->get_name());
        }
    }
    return printed ? Command::none : command();
}

bool StageArgs::was_given(const std::string& name) const {
    return std::find(given.begin(), given.end(), name) != given.end();
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
        {"--save-state", a.save_state.empty() ? "(none)" : "(given)"},
        {"--save-every", std::to_string(a.save_every)},
        {"--stop-after-steps", std::to_string(a.stop_after_steps)},
        {"--stop-signals", a.stop_signals},
        {"--resume", a.resume},
        {"--fingerprint", a.fingerprint},
        {"--balance-steps", a.balance_steps ? "on" : "off"},
        {"--compute-ms", std::to_string(a.compute_ms)},
        {"--compute-us", std::to_string(a.compute_us)},
        {"--stage", a.stage},
        {"--stage-budget", std::to_string(a.stage_budget)},
        {"--stage-ranks-per-node", std::to_string(a.stage_ranks_per_node)},
        {"--two-phase", a.two_phase ? "on" : "off"},
        {"--batch-bytes", std::to_string(a.batch_bytes)},
        {"--batch-tokens", std::to_string(a.batch_tokens)},
        {"--max-batch-samples", std::to_string(a.max_batch_samples)},
        {"--token-field", a.token_field},
        {"--bucket-window", std::to_string(a.bucket_window)},
        {"--sqlite", a.sqlite},
        {"--query", a.query},
        {"--shard", a.shard},
        {"--chunk-rows", std::to_string(a.chunk_rows)},
        {"--on-dry", a.on_dry},
        {"--ids-out", a.ids_out.empty() ? "(none)" : "(given)"},
        {"--column", join_words(a.columns)},
        {"--nulls", a.nulls},
    };
}

}  // namespace mpistage::cli
