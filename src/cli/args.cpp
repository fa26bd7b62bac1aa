// The `mpistage` command line: CLI11 options bound to the option structs, and the collective
// parse that fails every rank, not one, when ranks were given different or bad arguments.
#include "cli/args.hpp"

#include <algorithm>

#include "cli/stage_options.hpp"
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
    add_stage_options(*stage_cmd_, stage);
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
    parse_local(argc, argv);
    return agree_parsed(comm);
}

void CommandLine::parse_local(int argc, char** argv) {
    printed_.reset();
    parsed_ = capture([&] {
        try {
            check_command_words(app_, argc, argv);
            app_.parse(argc, argv);
        } catch (const CLI::Success& e) {  // --help, --help-all, --version
            printed_ = e;
        } catch (const CLI::ParseError& e) {
            throw ConfigError(std::string(e.what()) + " (see --help)");
        }
    });
    if (!parsed_.failed && !printed_ && command() == Command::stage) {
        stage.command_line.assign(argv, argv + argc);
        stage.given.clear();
        for (const CLI::Option* o : stage_cmd_->get_options()) {
            if (o->count() > 0) stage.given.push_back(option_name(*o));
        }
    }
}

Command CommandLine::agree_parsed(const Communicator& comm) {
    // Parsed on every rank, now agreed: a parse error on one rank (a wrapper script passing it
    // other flags) fails every rank instead of hanging the others.
    const bool printed = printed_.has_value();
    if (printed && comm.rank() == 0 && !parsed_.failed) app_.exit(*printed_);
    agree_or_throw(comm, parsed_);
    // The command decides every collective that follows: it must be the same everywhere.
    require_same(comm,
                 {{"--help/--version", printed ? "given" : "not given"},
                  {"the command", printed ? "(help)" : command_name(command())}},
                 "ranks were given different arguments", kSameCommandAdvice);
    return printed ? Command::none : command();
}

std::chrono::seconds CommandLine::watchdog_timeout() const {
    if (parsed_.failed || printed_ || command() != Command::stage) return kDefaultCollectiveTimeout;
    const std::chrono::seconds t(stage.timeout_seconds);
    if (t.count() < 0 || t > kMaxTimeout) return kDefaultCollectiveTimeout;
    return t;
}

std::string option_name(const CLI::Option& o) {
    if (!o.get_lnames().empty()) return "--" + o.get_lnames().front();
    if (!o.get_snames().empty()) return "-" + o.get_snames().front();
    return o.get_name(true);
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
        {"--stop-marker", a.stop_marker},
        {"--resume", a.resume},
        {"--fingerprint", a.fingerprint},
        {"--accept-legacy-state", a.accept_legacy_state ? "on" : "off"},
        {"--balance-steps", a.balance_steps ? "on" : "off"},
        {"--chunk-samples", std::to_string(a.chunk_samples)},
        {"--window-chunks", std::to_string(a.window_chunks)},
        {"--compute-ms", std::to_string(a.compute_ms)},
        {"--compute-us", std::to_string(a.compute_us)},
        {"--stage", a.stage},
        {"--stage-budget", std::to_string(a.stage_budget)},
        {"--stage-ranks-per-node", std::to_string(a.stage_ranks_per_node)},
        {"--stage-read", a.stage_read},
        {"--two-phase", a.two_phase},
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
        {"--progress", a.progress},
        {"--progress-every", std::to_string(a.progress_every_seconds)},
    };
}

}  // namespace mpistage::cli
