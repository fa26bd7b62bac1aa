// The options of `mpistage stage`: CLI11 options bound to StageArgs, grouped by topic in
// --help; the testing knobs are in no group (not listed, still accepted).
#include "cli/stage_options.hpp"

#include "mpistage/device.hpp"
#include "mpistage/error.hpp"

namespace mpistage::cli {

CLI::Validator non_negative(const std::string& hidden_names) {
    const std::string flag = hidden_names.substr(0, hidden_names.find(','));
    return CLI::Validator(
        [flag](std::string& value) -> std::string {
            const auto first = value.find_first_not_of(" \t");
            if (first != std::string::npos && value[first] == '-') {
                // CLI11 prefixes "--flag: " to the message, but not for options in no --help
                // group: those name themselves.
                return (flag.empty() ? "" : flag + ": ") + "must not be negative (got '" + value +
                       "')";
            }
            return {};
        },
        "NONNEGATIVE", "non-negative");
}

CLI::Validator whole_number(const std::string& unit) {
    return CLI::Validator(
        [unit](std::string& value) -> std::string {
            const auto first = value.find_first_not_of(" \t");
            const auto last = value.find_last_not_of(" \t");
            if (first == std::string::npos) return "takes whole " + unit + " (got '')";
            for (auto i = first; i <= last; ++i) {
                if (value[i] < '0' || value[i] > '9') {
                    if (i == first && (value[i] == '-' || value[i] == '+')) continue;
                    return "takes whole " + unit + " (got '" + value + "')";
                }
            }
            return {};
        },
        "WHOLE", "a whole number");
}

namespace {

void add_stage_data_options(CLI::App& cmd, StageArgs& a) {
    cmd.option_defaults()->group("Input");
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
    cmd.option_defaults()->group("Batches and order");
    add_count(cmd, "--batch-size,-b", a.batch_size, "Samples per batch on each rank");
    add_count(cmd, "--epochs,-e", a.epochs, "Epochs to stage");
    add_count(cmd, "--first-epoch", a.first_epoch, "Number of the first epoch");
    cmd.add_option("--shuffle", a.shuffle,
                   "none, local (byte_range: each rank's shard), global (all samples each "
                   "epoch, like DistributedSampler(shuffle=True)) or chunks (data larger than "
                   "memory: chunks of contiguous samples dealt to ranks each epoch, shuffled "
                   "within windows; docs/shuffle.md); global and chunks alone imply --sharding "
                   "global")
        ->capture_default_str();
    add_count(cmd, "--chunk-samples", a.chunk_samples,
              "--shuffle chunks: samples per chunk, read together (default: from the stage "
              "budget, two windows of chunks per rank)");
    add_count(cmd, "--window-chunks", a.window_chunks,
              "--shuffle chunks: chunks per window, shuffled together on one rank (default 256)");
    cmd.add_option("--sharding", a.sharding, "byte_range or global")->capture_default_str();
    add_count(cmd, "--seed", a.seed, "Shuffle seed");
    cmd.add_option("--remainder", a.remainder, "drop, pad or mask")->capture_default_str();
    add_count(cmd, "--prefetch", a.prefetch, "Batches read ahead (ring depth)")
        ->group("Reading and devices");
    add_count(cmd, "--threads", a.threads,
              "Background I/O threads (0 = read on the caller; under Slurm give the rank "
              "--cpus-per-task for them). --sqlite: 0 unless given (give 1 when producing a "
              "row costs more than a few microseconds)")
        ->group("Reading and devices")
        ->each([&a](const std::string&) { a.threads_given = true; });
}

void add_stage_safety_options(CLI::App& cmd, StageArgs& a) {
    cmd.option_defaults()->group("Checks and output");
    cmd.add_flag("--verify", a.verify,
                 "Check that every sample is yielded exactly once per "
                 "epoch with equal batch counts; exit 1 otherwise");
    cmd.add_option("--timeout", a.timeout_seconds,
                   "Seconds a rank waits in one of the loader's "
                   "collectives for the other ranks before the job is aborted with a message "
                   "naming them (0 = wait forever)")
        ->capture_default_str()
        ->check(whole_number("seconds"))
        ->check(non_negative())
        ->check(CLI::Range(std::int64_t{0}, static_cast<std::int64_t>(kMaxTimeout.count())));
    cmd.add_flag("--verify-files", a.verify_files,
                 "Hash every byte of the dataset and compare "
                 "across ranks (reads the whole dataset once; default: boundary samples only)");
    cmd.add_option("--json", a.json,
                   "Write a JSON report to this file (rank 0; written "
                   "atomically, also on error with \"status\": \"error\")");
    cmd.add_flag("--quiet,-q", a.quiet, "Print nothing but errors");
    cmd.add_option("--progress", a.progress,
                   "Rank 0's progress on stderr: bar (a line rewritten in place), lines (a "
                   "line with rate, ETA and wait split every --progress-every seconds, for "
                   "logs), none, or auto (bar on a terminal, else lines)")
        ->capture_default_str();
    add_count(cmd, "--progress-every", a.progress_every_seconds,
              "Seconds between two progress lines (--progress lines)");
}

void add_stage_resume_options(CLI::App& cmd, StageArgs& a) {
    cmd.option_defaults()->group("Fault recovery");
    cmd.add_option("--save-state", a.save_state,
                   "Write the loader state (JSON, a few hundred bytes) to this file: rank 0 "
                   "writes it atomically every --save-every steps and at the end; with --verify "
                   "also FILE.ids, the ids consumed so far in the state's epoch");
    add_count(cmd, "--save-every", a.save_every,
              "Steps between two --save-state writes (0 = only at the end)");
    add_count(cmd, "--stop-after-steps", a.stop_after_steps,
              "Stop after this many steps of this run, as if the job were interrupted "
              "(0 = run every epoch)",
              /*hidden=*/true)
        ->group("");  // testing
    cmd.add_option("--stop-signals", a.stop_signals,
                   "Signals (comma-separated, e.g. USR1,TERM, or none) that stop the run (FILE or "
                   "--sqlite input) at "
                   "the next agreed step on every rank (also when only some ranks get one): "
                   "the state is saved (--save-state) and the run exits with code 75; resume "
                   "with --resume")
        ->capture_default_str();
    cmd.add_option("--stop-marker", a.stop_marker,
                   "A file removed before the run and written when a --stop-signals signal "
                   "stopped it (state saved): a job script tells \"stopped for preemption\" "
                   "from \"failed\" by it where the launcher hides exit code 75 (mpirun "
                   "exits 1 after forwarding SIGTERM)");
    cmd.add_option("--resume", a.resume,
                   "Continue from a --save-state file: the rest of its epoch, then the epochs up "
                   "to --first-epoch + --epochs. Global sharding resumes at any number of "
                   "ranks, byte_range at the same number");
    cmd.add_flag("--accept-legacy-state", a.accept_legacy_state,
                 "Let --resume take a state without a consumed-id digest (format version 1 to "
                 "3): its consumed samples cannot be checked (refused by default)");
    cmd.add_option("--fingerprint", a.fingerprint,
                   "What the saved state's dataset fingerprint covers: sampled (the bytes and "
                   "sizes of 1024 spread samples and the first and last: at most 1026 reads "
                   "whatever the dataset's size; misses an edit of an unread sample) or full "
                   "(also every sample's size and bytes, hashed in parallel: reads the dataset "
                   "once, with progress lines). A --resume checks the dataset at the level its "
                   "state was saved with")
        ->capture_default_str()
        ->check(CLI::IsMember({"sampled", "full"}));
    cmd.add_flag("--balance-steps", a.balance_steps,
                 "Global sharding: inside each global batch, assign samples to ranks so bytes "
                 "per rank per step are balanced (equal counts, same global batch)")
        ->group("Batches and order");
    cmd.option_defaults()->group("Benchmarking");
    add_count(cmd, "--compute-ms", a.compute_ms,
              "Emulated compute per step in milliseconds (sleeps after each batch, like a "
              "training step)");
    add_count(cmd, "--compute-us", a.compute_us,
              "Emulated compute per step in microseconds, added to --compute-ms (for "
              "sub-millisecond steps)");
}

void add_stage_device_options(CLI::App& cmd, StageArgs& a) {
    cmd.option_defaults()->group("Reading and devices");
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
                   "Where batches go: auto (the current CUDA device, else the one of the rank's "
                   "node-local rank in the job mod visible devices; else the CPU, said in one "
                   "line), cpu, cuda or cuda:N")
        ->capture_default_str()
        ->check(device_form);
}

void add_stage_tier_options(CLI::App& cmd, StageArgs& a) {
    cmd.option_defaults()->group("Reading and devices");
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
              "cross-node MPI_Get path runs on one machine (0 = real nodes)",
              /*hidden=*/true)
        ->group("");
    cmd.add_option("--stage-read", a.stage_read,
                   "How --stage memory takes in a shard: map (map the files' pages, read them "
                   "in and lock them in memory: no copy of our own; the files must not be "
                   "truncated or rewritten while the job runs; refused by name where a field "
                   "cannot be mapped or the lock is refused), copy (read into a node "
                   "shared-memory window) or auto (map where it applies, else copy)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "map", "copy"}));
    cmd.add_option("--two-phase", a.two_phase,
                   "off, on (global sharding without staging: each rank reads only its "
                   "contiguous slab's samples of a step, sorted and coalesced, and one exchange "
                   "per step routes them to the ranks that consume them) or auto (on only where "
                   "a cost model measured at start predicts a step <= 0.8x the plain one; off "
                   "outside global sharding without staging)")
        ->capture_default_str();
}

void add_stage_budget_options(CLI::App& cmd, StageArgs& a) {
    cmd.option_defaults()->group("Batches and order");
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
    cmd.option_defaults()->group("Streams (--sqlite)");
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
                   "delivered, one per line (for checks)")
        ->group("");  // testing
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

}  // namespace

void add_stage_options(CLI::App& cmd, StageArgs& a) {
    add_stage_data_options(cmd, a);
    add_stage_plan_options(cmd, a);
    add_stage_safety_options(cmd, a);
    add_stage_resume_options(cmd, a);
    add_stage_device_options(cmd, a);
    add_stage_tier_options(cmd, a);
    add_stage_budget_options(cmd, a);
    add_stage_stream_options(cmd, a);
    cmd.option_defaults()->group("Options");  // what is added later
}

}  // namespace mpistage::cli
