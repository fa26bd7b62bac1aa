#pragma once
// Command-line arguments of the `mpistage` executable: one option struct per command, the CLI11
// description that fills them, and the collective parse that makes every rank agree on the
// outcome (internal to the CLI).

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "plan/implied_sharding.hpp"

namespace mpistage::cli {

/// `mpistage stage FILE... [options]`.
struct StageArgs {
    std::vector<std::string> files;
    std::vector<std::string> fields;
    std::string format = "auto";
    std::uint64_t batch_size = 32;
    std::uint64_t epochs = 1;
    std::uint64_t first_epoch = 0;
    std::string shuffle = "none";
    std::string sharding = "byte_range";
    std::uint64_t seed = 0;
    std::string remainder = "drop";
    std::size_t prefetch = 2;
    std::size_t threads = 1;
    /// --threads was given. For --sqlite the default is 0 (rows read inside the loop): for
    /// cheap rows the hand-over to the loop costs more than reading them there
    /// (benchmarks/README.md, "Stream read-ahead"); FILE input's default is 1.
    bool threads_given = false;
    /// auto, cpu, cuda or cuda:N (LoaderOptions::delivery.device); may differ between ranks.
    std::string device = "auto";
    bool verify = false;
    /// Watchdog deadline of the loader's collectives in seconds (0 disables).
    std::int64_t timeout_seconds = 300;
    /// Hash every byte of the dataset across ranks (LoaderOptions::safety.verify_files).
    bool verify_files = false;
    /// --fingerprint: sampled or full (LoaderOptions::safety.fingerprint).
    std::string fingerprint = "sampled";
    /// --accept-legacy-state (LoaderOptions::safety.accept_legacy_state).
    bool accept_legacy_state = false;
    std::string json;
    bool quiet = false;
    /// --progress auto|bar|lines|none (cli/progress.hpp) and the seconds between two lines.
    std::string progress = "auto";
    std::uint64_t progress_every_seconds = 30;
    std::vector<std::string> index_paths;
    std::vector<std::string> features;
    std::string on_corrupt = "error";
    /// Fault recovery (docs/resume.md).
    std::string save_state;
    std::uint64_t save_every = 0;
    std::uint64_t stop_after_steps = 0;
    /// Signals that stop the run at the next agreed step, save the state and exit 75
    /// (cli/stop_signals.hpp); "none" = none.
    std::string stop_signals = "USR1,TERM";
    /// --stop-marker: a file rank 0 removes before the run and writes when a stop signal ended
    /// it (the launcher-independent form of exit code 75; empty: none).
    std::string stop_marker;
    std::string resume;
    bool balance_steps = false;
    /// --shuffle chunks: samples per chunk and chunks per window (0: from the stage budget).
    std::uint64_t chunk_samples = 0;
    std::uint64_t window_chunks = 0;
    /// Emulated compute per step in milliseconds (paces a run like a trainer would).
    std::uint64_t compute_ms = 0;
    /// Emulated compute per step in microseconds, added to compute_ms (sub-millisecond steps).
    std::uint64_t compute_us = 0;
    /// --stage none|memory|auto (LoaderOptions::tier.stage).
    std::string stage = "none";
    /// --stage-budget bytes per rank (0 = default; LoaderOptions::tier.stage_budget_bytes).
    std::uint64_t stage_budget = 0;
    /// --stage-ranks-per-node (testing; LoaderOptions::tier.stage_ranks_per_node).
    std::uint64_t stage_ranks_per_node = 0;
    /// --stage-read auto|map|copy (LoaderOptions::tier.stage_read).
    std::string stage_read = "auto";
    /// --two-phase off|on|auto (LoaderOptions::pipeline.two_phase).
    std::string two_phase = "off";

    /// Budget batches (files or --sqlite): --batch-bytes / --batch-tokens (0 = off), the most
    /// samples of one batch, the ragged field counted as tokens ("" = the only ragged one) and
    /// the length-sorting window in batches (0 or 1 = none).
    std::uint64_t batch_bytes = 0;
    std::uint64_t batch_tokens = 0;
    std::uint64_t max_batch_samples = 4096;
    std::string token_field;
    std::uint64_t bucket_window = 0;

    /// Streams: --sqlite DB --query SQL, sharded by --shard, read in --chunk-rows chunks.
    std::string sqlite;
    std::string query;
    std::string shard = "chunk";
    std::uint64_t chunk_rows = 256;
    /// --on-dry rebalance|mask (StreamPlanOptions::remainder).
    std::string on_dry = "rebalance";
    /// Rank 0 writes the ids of every delivered row here (one per line, ascending).
    std::string ids_out;
    /// --column NAME:TYPE[:convert] (SqliteOptions::columns), repeatable.
    std::vector<std::string> columns;
    /// --nulls error|mask|fill:VALUE (SqliteOptions::nulls).
    std::string nulls = "error";

    /// The command line as given (argv, the program first), for the report.
    std::vector<std::string> command_line;
    /// Long names of the flags given on the command line ("--epochs", "files"), filled by
    /// `CommandLine::parse_agreed`; a flag not listed kept its default.
    std::vector<std::string> given;
    /// True when flag `name` (long name, e.g. "--batch-size") was given.
    bool was_given(const std::string& name) const;
    /// True when batches are sized by a budget (--batch-bytes or --batch-tokens).
    bool budget() const noexcept { return batch_bytes > 0 || batch_tokens > 0; }
    /// --sharding as the run uses it: `--shuffle global` alone is the one switch of a global
    /// shuffle (PlanOptions::shuffle_globally) and implies `global`.
    std::string effective_sharding() const {
        return mpistage::detail::implied_sharding(shuffle, was_given("--sharding"), sharding);
    }
    /// True when the input is a stream (--sqlite).
    bool stream() const noexcept { return !sqlite.empty(); }
};

/// Local: the long name of option `o` with its dashes ("--batch-size"), or a positional's name
/// ("files"). Unlike CLI11's get_name(), also for options hidden from --help (no group).
std::string option_name(const CLI::Option& o);

/// `mpistage convert idx IMAGES LABELS -o OUT [options]`.
struct ConvertArgs {
    std::string images;
    std::string labels;
    std::string output;
    std::uint64_t chunk_rows = 0;
    int gzip_level = 0;
    std::string format = "hdf5";
};

/// `mpistage index FILE... [-o OUT]...`.
struct IndexArgs {
    std::vector<std::string> files;
    std::vector<std::string> outputs;
};

/// Which command a command line selects.
enum class Command { none, stage, convert_idx, index };

/// Name of a command as the user types it ("stage", "convert idx", "index", "(none)").
std::string command_name(Command c);

/// The CLI11 application with every command and option bound to the structs below.
/// Not copyable or movable (CLI11 keeps pointers into it).
class CommandLine {
public:
    CommandLine();
    CommandLine(const CommandLine&) = delete;
    CommandLine& operator=(const CommandLine&) = delete;

    /// `stage` for every input: files, budget batches and streams.
    StageArgs stage;
    ConvertArgs convert;
    IndexArgs index;

    /// The command this rank parsed (Command::none before parsing or when none was given).
    Command command() const;
    /// Collective over `comm`: parses `argv` on every rank, then agrees on the outcome: a parse
    /// error on any rank (bad flag, negative value for an unsigned flag) is the same ConfigError
    /// on every rank; --help/--version given on some ranks only, or different commands, are a
    /// ConfigError on every rank (require_same). Returns Command::none on every rank when
    /// --help or --version was printed (by rank 0). @throws ConfigError (agreed), MpiError.
    Command parse_agreed(const Communicator& comm, int argc, char** argv);
    /// The two halves of `parse_agreed`, for `main`, which builds its `Communicator` in between
    /// with the deadline the command line asks for (`watchdog_timeout`), so a rank that never
    /// reaches the communicator's construction ends the job after the user's `--timeout`.
    /// `parse_local` is local and never throws (a parse error is kept for the agreement);
    /// `agree_parsed` is collective, as `parse_agreed`.
    void parse_local(int argc, char** argv);
    Command agree_parsed(const Communicator& comm);
    /// Local: `stage --timeout` when `parse_local` parsed a stage command, else the default
    /// watchdog deadline (`kDefaultCollectiveTimeout`); out-of-range values give the default
    /// (the stage command refuses them by name later).
    std::chrono::seconds watchdog_timeout() const;
    /// Local: true when `parse_local` met --help, --help-all or --version, which `main` prints
    /// without a communicator in a world of one (a `mpistage --version` in a batch script is
    /// not refused by the launcher check); `print_help_or_version` prints it.
    bool help_or_version() const noexcept { return printed_.has_value() && !parsed_.failed; }
    void print_help_or_version() { app_.exit(*printed_); }
    /// The CLI11 description of every command (local; for help texts and tests).
    CLI::App& app() { return app_; }
    /// The `stage` subcommand (its options are what `stage --help` lists).
    const CLI::App& stage_command() const { return *stage_cmd_; }

private:
    CLI::App app_;
    CLI::App* stage_cmd_ = nullptr;
    CLI::App* convert_idx_cmd_ = nullptr;
    CLI::App* index_cmd_ = nullptr;
    LocalStatus parsed_;                   // parse_local's outcome, agreed by agree_parsed
    std::optional<CLI::Success> printed_;  // --help/--version: printed by rank 0 at agreement
};

/// The stage flags that decide which collectives a rank makes or what it stages, as named
/// texts for `require_same` ("--batch-size" → "64"). `--prefetch`, `--threads`, `--device` and
/// `--quiet` may differ between ranks and are not listed; paths rank 0 writes are listed as
/// given / not given.
std::vector<NamedValue> stage_argument_values(const StageArgs& a);

/// The words of `v` separated by single spaces.
std::string join_words(const std::vector<std::string>& v);

/// The advice every "ranks were given different arguments" error ends with.
extern const char* const kSameCommandAdvice;

}  // namespace mpistage::cli
