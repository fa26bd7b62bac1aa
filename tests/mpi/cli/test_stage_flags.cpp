// Every option of `mpistage stage` (read from the CLI11 app, so a new flag is covered without
// touching this file's loop) × every input kind (HDF5 file, TFRecord file, IDX files, budget
// batches, SQLite stream), staged in-process through the real command line (issue 22,
// acceptance 3). A flag is either refused — a ConfigError, the same on every rank, naming the
// flag and the input kind — or takes effect, checked in the JSON report (options read back from
// the loader, counts of what was staged) or the output. A flag without an entry in kSpec fails
// the test, and so does a flag accepted for an input without the effect its entry asserts.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/report.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/error.hpp"
#include "temp_dirs.hpp"

namespace {

using json = nlohmann::json;
using Args = std::vector<std::string>;
namespace fs = std::filesystem;

const std::string kFmnist = MPISTAGE_FASHION_MNIST_DIR;

/// What one `mpistage stage` run did on this rank.
struct Outcome {
    int rc = 0;
    std::string error;   ///< "ConfigError: message" when it threw
    std::string output;  ///< stdout and stderr of this rank
    json report;         ///< the --json report of a finished run (null otherwise)
};

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

/// The test's files, made once per process (rank 0 writes, every rank reads).
struct Inputs {
    std::string dir, h5, tfr, images, labels, db, bad_index, corrupt;
};

const Inputs& inputs() {
    static Inputs in = [] {
        long id = static_cast<long>(getpid());
        MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        Inputs p;
        p.dir = (fs::temp_directory_path() / ("mpistage_flags_" + std::to_string(id))).string();
        p.h5 = p.dir + "/t10k.h5";
        p.tfr = p.dir + "/t10k.tfrecord";
        p.images = p.dir + "/t10k-images-idx3-ubyte";
        p.labels = p.dir + "/t10k-labels-idx1-ubyte";
        p.db = p.dir + "/rows.db";
        p.bad_index = p.dir + "/bad.idx";
        p.corrupt = p.dir + "/corrupt.tfrecord";
        if (h5t::rank() == 0) {
            fs::create_directories(p.dir);
            mpistage_test::remove_at_exit(p.dir);
            for (const std::string& f : {p.images, p.labels}) {
                const std::string name = fs::path(f).filename().string();
                const std::string cmd = "gunzip -c '" + kFmnist + "/" + name + ".gz' > '" + f + "'";
                EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
            }
            std::ofstream(p.bad_index) << "0 17\n17 5\n";
            sqlite3* db = nullptr;
            EXPECT_EQ(sqlite3_open(p.db.c_str(), &db), SQLITE_OK);
            sqlite3_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, payload BLOB)", nullptr,
                         nullptr, nullptr);
            sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
            sqlite3_stmt* st = nullptr;
            sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?, ?)", -1, &st, nullptr);
            for (int i = 0; i < 2000; ++i) {
                std::string payload(static_cast<std::size_t>(i % 97), static_cast<char>(i));
                sqlite3_bind_int(st, 1, i);
                sqlite3_bind_blob(st, 2, payload.data(), static_cast<int>(payload.size()),
                                  SQLITE_TRANSIENT);
                EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
                sqlite3_reset(st);
            }
            sqlite3_finalize(st);
            sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
            sqlite3_close(db);
        }
        h5t::barrier();
        mpistage::Communicator comm(MPI_COMM_WORLD);
        for (const char* format : {"hdf5", "tfrecord"}) {
            mpistage::cli::ConvertArgs c;
            c.images = kFmnist + "/t10k-images-idx3-ubyte.gz";
            c.labels = kFmnist + "/t10k-labels-idx1-ubyte.gz";
            c.output = std::string(format) == "hdf5" ? p.h5 : p.tfr;
            c.format = format;
            mpistage::cli::run_convert(comm, c);
        }
        comm.free();
        if (h5t::rank() == 0) {  // the TFRecord copy with one payload byte flipped
            std::string bytes = read_text(p.tfr);
            bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
            std::ofstream(p.corrupt, std::ios::binary) << bytes;
        }
        h5t::barrier();
        return p;
    }();
    return in;
}

/// Collective: runs `mpistage stage ARGS --json REPORT` in this process on every rank, with
/// this rank's stdout and stderr captured.
Outcome stage(Args args) {
    const Inputs& in = inputs();
    const std::string report = in.dir + "/case.json";
    if (h5t::rank() == 0) std::remove(report.c_str());
    args.insert(args.begin(), {"mpistage", "stage"});
    args.insert(args.end(), {"--json", report});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string captured = in.dir + "/out." + std::to_string(h5t::rank());
    std::fflush(stdout);
    std::fflush(stderr);
    const int saved_out = dup(1), saved_err = dup(2);
    const int fd = open(captured.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    Outcome o;
    h5t::barrier();
    {
        mpistage::cli::CommandLine cl;
        mpistage::Communicator comm(MPI_COMM_WORLD);
        try {
            if (cl.parse_agreed(comm, static_cast<int>(args.size()), argv.data()) ==
                mpistage::cli::Command::stage) {
                o.rc = mpistage::cli::run_stage(comm, cl.stage);
            }
        } catch (const mpistage::Error& e) {
            o.rc = 2;
            o.error = mpistage::cli::error_kind_name(e.kind()) + ": " + e.what();
        }
        comm.free();
    }
    std::fflush(stdout);
    std::fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    o.output = read_text(captured);
    h5t::barrier();
    if (o.rc != 2 && fs::exists(report)) o.report = json::parse(read_text(report));
    h5t::barrier();  // every rank has read the report before rank 0 removes it for the next run
    return o;
}

const std::vector<std::string> kKinds = {"hdf5", "tfrecord", "idx", "budget", "sqlite"};
const std::string kQuery = "SELECT id, payload FROM t ORDER BY id";

Args base_args(const std::string& kind) {
    const Inputs& in = inputs();
    if (kind == "hdf5") return {in.h5};
    if (kind == "tfrecord") return {in.tfr};
    if (kind == "idx") return {in.images, in.labels};
    if (kind == "budget") return {in.tfr, "--batch-bytes", "20000"};
    return {"--sqlite", in.db, "--query", kQuery};
}

/// The word a refusal names for each kind (budget batches here read a TFRecord file).
std::string kind_word(const std::string& kind) {
    return kind == "budget" ? "tfrecord" : kind;
}

std::uint64_t steps(const json& r) {
    std::uint64_t n = 0;
    for (const auto& e : r["epochs"]) n += e["steps"].get<std::uint64_t>();
    return n;
}
std::vector<std::string> field_names(const json& r) {
    std::vector<std::string> names;
    for (const auto& f : r["fields"]) names.push_back(f["name"]);
    return names;
}
std::uint64_t rank_sum(const json& r, const char* key) {
    std::uint64_t n = 0;
    for (const auto& x : r["ranks"]) n += x[key].get<std::uint64_t>();
    return n;
}
double min_rank_seconds(const json& r) {
    double s = 1e300;
    for (const auto& x : r["ranks"]) s = std::min(s, x["seconds"].get<double>());
    return s;
}
std::uint64_t max_batch(const json& r) {
    std::uint64_t m = 0;
    for (const auto& e : r["epochs"]) m = std::max(m, e["max_batch_samples"].get<std::uint64_t>());
    return m;
}
// The flag was honoured, and the run then failed on what it said (not a refusal).
bool failed_by_flag(const Outcome& o) {
    return o.rc == 2 && o.error.find("does not apply") == std::string::npos &&
           o.error.find("does not combine") == std::string::npos;
}
std::string token_field(const std::string& kind) {
    return kind == "sqlite" ? "payload" : kind == "hdf5" ? "images" : "record";
}

struct Context {
    std::string kind;
    const Outcome& run;
    const json& r;     ///< the run's report
    const json& base;  ///< the report of the same input without the flag
    std::string work;  ///< a scratch path prefix
};

/// One flag: its arguments for an input kind, and the effect an accepted run must show.
struct Spec {
    std::function<Args(const std::string& kind, const std::string& work)> args;
    std::function<bool(const Context&)> effect;
};

std::map<std::string, std::string>& states() {
    static std::map<std::string, std::string> s;
    return s;
}

const std::map<std::string, Spec>& spec() {
    static const std::map<std::string, Spec> s = {
        {"--field",
         {[](const std::string& k, const std::string&) {
              return k == "idx" ? Args{"--field", "pixels", "--field", "label"}
                                : Args{"--field", "images"};
          },
          [](const Context& c) {
              return field_names(c.r) == (c.kind == "idx"
                                              ? std::vector<std::string>{"pixels", "label"}
                                              : std::vector<std::string>{"images"});
          }}},
        {"--format",
         {[](const std::string& k, const std::string&) {
              return Args{"--format", k == "idx" ? "hdf5" : "idx"};
          },
          [](const Context& c) { return failed_by_flag(c.run); }}},
        {"--index",
         {[](const std::string&, const std::string&) {
              return Args{"--index", inputs().bad_index};
          },
          [](const Context& c) {
              return failed_by_flag(c.run) && c.run.error.find("bad.idx") != std::string::npos;
          }}},
        {"--feature",
         {[](const std::string&, const std::string&) {
              return Args{"--feature", "label:int64"};
          },
          [](const Context& c) { return field_names(c.r) == std::vector<std::string>{"label"}; }}},
        {"--on-corrupt",
         {[](const std::string& k, const std::string&) {
              // A second TFRecord file with a damaged record (FILE input only).
              return k == "sqlite" ? Args{"--on-corrupt", "skip"}
                                   : Args{"--on-corrupt", "skip", inputs().corrupt};
          },
          [](const Context& c) { return c.r.value("skipped_records", 0) > 0; }}},
        {"--batch-size",
         {[](const std::string&, const std::string&) {
              return Args{"--batch-size", "7"};
          },
          [](const Context& c) { return c.r["batch_size"] == 7 && max_batch(c.r) == 7; }}},
        {"--epochs",
         {[](const std::string&, const std::string&) {
              return Args{"--epochs", "2"};
          },
          [](const Context& c) {
              return c.r["epochs"].size() == 2 && c.r["epochs"][1]["epoch"] == 1 &&
                     steps(c.r) == 2 * steps(c.base);
          }}},
        {"--first-epoch",
         {[](const std::string&, const std::string&) {
              return Args{"--first-epoch", "3"};
          },
          [](const Context& c) {
              return c.r["epochs"].size() == 1 && c.r["epochs"][0]["epoch"] == 3;
          }}},
        {"--shuffle",
         {[](const std::string&, const std::string&) {
              return Args{"--shuffle", "local"};
          },
          [](const Context& c) { return c.r["options"]["shuffle"] == "local"; }}},
        {"--sharding",
         {[](const std::string&, const std::string&) {
              return Args{"--sharding", "global"};
          },
          [](const Context& c) { return c.r["options"]["sharding"] == "global"; }}},
        {"--seed",
         {[](const std::string&, const std::string&) {
              return Args{"--seed", "9"};
          },
          [](const Context& c) { return c.r["options"]["seed"] == 9; }}},
        {"--remainder",
         {[](const std::string&, const std::string&) {
              return Args{"--remainder", "mask"};
          },
          [](const Context& c) {
              // 10000 samples at 1-4 ranks: some rank's last batch of 32 is partly masked.
              return c.r["options"]["remainder"] == "mask" &&
                     c.r["epochs"][0]["padding_slots"].get<std::uint64_t>() > 0;
          }}},
        {"--prefetch",
         {[](const std::string&, const std::string&) {
              return Args{"--prefetch", "5"};
          },
          [](const Context& c) { return c.r["options"]["prefetch"] == 5; }}},
        {"--threads",
         {[](const std::string&, const std::string&) {
              return Args{"--threads", "3"};
          },
          [](const Context& c) { return c.r["options"]["io_threads"] == 3; }}},
        {"--verify",
         {[](const std::string&, const std::string&) { return Args{"--verify"}; },
          [](const Context& c) {
              // Rank 0 prints the verdict.
              return c.r["epochs"][0].value("exactly_once", false) &&
                     (h5t::rank() != 0 ||
                      c.run.output.find("exactly-once: OK") != std::string::npos);
          }}},
        {"--timeout",
         {[](const std::string&, const std::string&) {
              return Args{"--timeout", "77"};
          },
          [](const Context& c) { return c.r["options"]["timeout_seconds"] == 77; }}},
        {"--verify-files",
         {[](const std::string&, const std::string&) { return Args{"--verify-files"}; },
          [](const Context& c) { return c.r["options"]["verify_files"] == true; }}},
        {"--json",
         {[](const std::string&, const std::string&) { return Args{}; },
          [](const Context& c) { return c.r["status"] == "ok"; }}},
        {"--quiet",
         {[](const std::string&, const std::string&) { return Args{"--quiet"}; },
          [](const Context& c) { return c.run.output.empty(); }}},
        // none: no line inside an epoch, even at --progress-every 0 (which alone prints one
        // after every step, see below); the line per finished epoch stays.
        {"--progress",
         {[](const std::string&, const std::string&) {
              return Args{"--progress", "none", "--progress-every", "0"};
          },
          [](const Context& c) {
              return c.run.output.find("(1/1): step ") == std::string::npos &&
                     (h5t::rank() != 0 || c.run.output.find("(1/1): ") != std::string::npos);
          }}},
        // 0 seconds: a line inside the epoch after every step but the last (rank 0 only).
        {"--progress-every",
         {[](const std::string&, const std::string&) {
              return Args{"--progress", "lines", "--progress-every", "0"};
          },
          [](const Context& c) {
              return h5t::rank() != 0 || c.run.output.find("(1/1): step 1/") != std::string::npos;
          }}},
        {"--save-state",
         {[](const std::string&, const std::string& w) {
              return Args{"--save-state", w + ".st"};
          },
          [](const Context& c) {
              return c.r["state_saves"] == 1 &&
                     json::parse(read_text(c.work + ".st")).contains("mpistage_state");
          }}},
        {"--save-every",
         {[](const std::string&, const std::string& w) {
              return Args{"--save-every", "2", "--save-state", w + ".st2"};
          },
          // A save every 2 steps, and the final one unless the last periodic save was at
          // the same position (an even step count of FILE input, whose state after its last
          // step already points at the next epoch; a stream learns that its pass ended only
          // when the next step finds every rank dry, so its final state, at the next epoch,
          // always differs from the last periodic one).
          [](const Context& c) {
              const auto n = steps(c.r);
              return c.r["state_saves"] == n / 2 + (c.kind == "sqlite" ? 1 : n % 2);
          }}},
        {"--fingerprint",
         {[](const std::string&, const std::string& w) {
              return Args{"--fingerprint", "full", "--save-state", w + ".fp"};
          },
          [](const Context& c) {
              const json st = json::parse(read_text(c.work + ".fp"));
              return c.r["options"]["fingerprint"] == "full" &&
                     st["loader"]["fingerprint_level"] == "full";
          }}},
        {"--accept-legacy-state",
         {[](const std::string&, const std::string&) { return Args{"--accept-legacy-state"}; },
          [](const Context& c) {
              return c.r["options"]["accept_legacy_state"] == true &&
                     c.base["options"]["accept_legacy_state"] == false;
          }}},
        {"--stop-marker",
         {[](const std::string&, const std::string& w) {
              // A marker of an earlier run: removed before this one (which is not stopped).
              std::ofstream(w + ".marker") << "stopped by SIGTERM after 1 step(s)\n";
              return Args{"--stop-marker", w + ".marker"};
          },
          [](const Context& c) { return !std::ifstream(c.work + ".marker").good(); }}},
        {"--stop-after-steps",
         {[](const std::string&, const std::string&) {
              return Args{"--stop-after-steps", "2"};
          },
          [](const Context& c) { return c.r["stopped_after_steps"] == 2 && steps(c.r) == 2; }}},
        {"--stop-signals",
         {[](const std::string&, const std::string&) {
              return Args{"--stop-signals", "SIGUSR2,HUP"};
          },
          [](const Context& c) {
              return c.r["stop_signals"] == json::array({"USR2", "HUP"}) &&
                     c.base["stop_signals"] == json::array({"USR1", "TERM"}) &&
                     c.r["stopped_by_signal"].is_null();
          }}},
        {"--resume",
         {[](const std::string& k, const std::string&) {
              return Args{"--resume", states()[k]};
          },
          [](const Context& c) {
              return c.r.contains("resumed_from") && c.r["epochs"][0]["resumed"] == true &&
                     rank_sum(c.r, "samples") < rank_sum(c.base, "samples");
          }}},
        {"--balance-steps",
         {[](const std::string&, const std::string&) {
              return Args{"--balance-steps", "--sharding", "global"};
          },
          [](const Context& c) { return c.r["epochs"][0].contains("step_byte_ratio"); }}},
        {"--chunk-samples",
         {[](const std::string&, const std::string&) {
              return Args{"--chunk-samples", "50", "--shuffle", "chunks"};
          },
          [](const Context& c) {
              return c.r["options"]["chunk_samples"] == 50 &&
                     c.r["epochs"][0]["shuffle_quality"]["chunk_samples"] == 50;
          }}},
        {"--window-chunks",
         {[](const std::string&, const std::string&) {
              return Args{"--window-chunks", "8", "--shuffle", "chunks"};
          },
          [](const Context& c) {
              return c.r["options"]["window_chunks"] == 8 && c.r["options"]["shuffle"] == "chunks";
          }}},
        {"--compute-ms",
         {[](const std::string&, const std::string&) {
              return Args{"--compute-ms", "2"};
          },
          [](const Context& c) {
              return c.r["compute_us_per_step"] == 2000 &&
                     min_rank_seconds(c.r) >= 0.002 * static_cast<double>(steps(c.r));
          }}},
        {"--compute-us",
         {[](const std::string&, const std::string&) {
              return Args{"--compute-us", "2000"};
          },
          [](const Context& c) {
              return c.r["compute_us_per_step"] == 2000 &&
                     min_rank_seconds(c.r) >= 0.002 * static_cast<double>(steps(c.r));
          }}},
        {"--device",
         {[](const std::string&, const std::string&) {
              return Args{"--device", "cpu"};
          },
          [](const Context& c) {
              bool cpu = c.r["options"]["device"] == "cpu";
              for (const auto& x : c.r["ranks"]) cpu = cpu && x["device"] == "cpu";
              return cpu;
          }}},
        {"--stage",
         {[](const std::string&, const std::string&) {
              return Args{"--stage", "memory"};
          },
          [](const Context& c) { return c.r["stage"]["tier"] == "memory"; }}},
        {"--stage-budget",
         {[](const std::string&, const std::string&) {
              return Args{"--stage-budget", "1", "--stage", "auto"};
          },
          [](const Context& c) {
              return c.r["stage"]["tier"] == "file" && c.r["options"]["stage_budget_bytes"] == 1;
          }}},
        {"--stage-ranks-per-node",
         {[](const std::string&, const std::string&) {
              return Args{"--stage-ranks-per-node", "1", "--stage", "memory"};
          },
          [](const Context& c) {
              return c.r["options"]["stage_ranks_per_node"] == 1 &&
                     c.r["stage"]["tier"] == "memory";
          }}},
        {"--stage-read",
         {[](const std::string&, const std::string&) {
              return Args{"--stage-read", "copy", "--stage", "memory"};
          },
          [](const Context& c) {
              // Copied into the window, where `auto` maps a contiguous HDF5 dataset or IDX file.
              return c.r["options"]["stage_read"] == "copy" && c.r["stage"]["tier"] == "memory" &&
                     c.r["stage"]["read_method"] != "mapped" && c.r["stage"]["read_method"] != "";
          }}},
        {"--two-phase",
         {[](const std::string&, const std::string&) {
              return Args{"--two-phase", "on", "--sharding", "global"};
          },
          [](const Context& c) {
              return c.r["options"]["two_phase"] == "on" &&
                     c.r["stage"]["two_phase"]["option"] == "on" &&
                     c.r["stage"]["two_phase"]["chosen"] == true &&
                     c.base["stage"]["two_phase"]["chosen"] == false;
          }}},
        {"--batch-bytes",
         {[](const std::string&, const std::string&) {
              return Args{"--batch-bytes", "30000"};
          },
          [](const Context& c) {
              return c.r["input"]["batching"] == "budget" && c.r["budget"]["batch_bytes"] == 30000;
          }}},
        {"--batch-tokens",
         {[](const std::string&, const std::string&) {
              return Args{"--batch-tokens", "3000"};
          },
          [](const Context& c) {
              return c.r["input"]["batching"] == "budget" && c.r["budget"]["batch_tokens"] == 3000;
          }}},
        {"--max-batch-samples",
         {[](const std::string&, const std::string&) {
              return Args{"--max-batch-samples", "3", "--batch-bytes", "30000"};
          },
          [](const Context& c) { return max_batch(c.r) == 3; }}},
        {"--token-field",
         {[](const std::string& k, const std::string&) {
              return Args{"--token-field", token_field(k), "--batch-tokens", "3000"};
          },
          [](const Context& c) {
              const auto names = field_names(c.r);
              const auto index = c.r["options"]["token_field"].get<std::size_t>();
              return index < names.size() && names[index] == token_field(c.kind);
          }}},
        {"--bucket-window",
         {[](const std::string&, const std::string&) {
              return Args{"--bucket-window", "4"};
          },
          [](const Context& c) {
              const json& b = c.r["epochs"][0]["budget"];
              return c.r["budget"]["bucket_window"] == 4 &&
                     b["padding_waste"].get<double>() <=
                         b["unbucketed_padding_waste"].get<double>();
          }}},
        {"--sqlite",
         {[](const std::string&, const std::string&) {
              return Args{"--sqlite", inputs().db, "--query", kQuery};
          },
          [](const Context& c) { return c.r["input"]["kind"] == "sqlite"; }}},
        {"--query",
         {[](const std::string&, const std::string&) {
              return Args{"--query", "SELECT id, payload FROM t WHERE id < 500"};
          },
          [](const Context& c) {
              return c.r["num_samples"] == 500 && rank_sum(c.r, "samples") == 500;
          }}},
        {"--shard",
         {[](const std::string&, const std::string&) {
              return Args{"--shard", "hash:id"};
          },
          [](const Context& c) {
              return c.r["options"]["sharding"] == "hash" &&
                     (h5t::size() == 1 || rank_sum(c.r, "records_moved") > 0);
          }}},
        {"--chunk-rows",
         {[](const std::string&, const std::string&) {
              return Args{"--chunk-rows", "7"};
          },
          [](const Context& c) { return c.r["options"]["chunk_size"] == 7; }}},
        {"--on-dry",
         {[](const std::string&, const std::string&) {
              return Args{"--on-dry", "mask"};
          },
          [](const Context& c) { return c.r["options"]["remainder"] == "mask"; }}},
        {"--column",
         {[](const std::string&, const std::string&) {
              return Args{"--column", "id:text"};
          },
          [](const Context& c) {
              // The INTEGER column delivered as its text (ragged uint8) instead of int64.
              for (const auto& f : c.r["fields"]) {
                  if (f["name"] == "id") return f["dtype"] == "uint8" && f["ragged"] == true;
              }
              return false;
          }}},
        {"--nulls",
         {[](const std::string&, const std::string&) {
              return Args{"--nulls", "mask"};
          },
          [](const Context& c) {
              return field_names(c.r) ==
                     std::vector<std::string>{"id", "id.valid", "payload", "payload.valid"};
          }}},
        {"--ids-out",
         {[](const std::string&, const std::string& w) {
              return Args{"--ids-out", w + ".ids"};
          },
          [](const Context& c) {
              std::istringstream in(read_text(c.work + ".ids"));
              std::uint64_t lines = 0;
              for (std::string line; std::getline(in, line);) ++lines;
              return lines == rank_sum(c.r, "samples");
          }}},
    };
    return s;
}

/// Flags that must take effect (not be refused) for these inputs.
bool must_apply(const std::string& flag, const std::string& kind) {
    static const std::set<std::string> stream = {
        "--epochs",  "--first-epoch", "--json",         "--compute-us", "--compute-ms",
        "--timeout", "--quiet",       "--verify",       "--save-state", "--save-every",
        "--resume",  "--batch-bytes", "--batch-tokens", "--prefetch",   "--threads"};
    // Budget batches are served by the one Loader: its ring, threads, tier and state.
    static const std::set<std::string> budget = {"--prefetch",         "--threads",     "--stage",
                                                 "--save-state",       "--save-every",  "--resume",
                                                 "--stop-after-steps", "--verify-files"};
    static const std::set<std::string> every = {"--epochs", "--json", "--verify", "--compute-us"};
    return every.count(flag) > 0 || (kind == "sqlite" && stream.count(flag) > 0) ||
           (kind == "budget" && budget.count(flag) > 0);
}

TEST(StageFlags, EveryFlagTakesEffectOrIsRefusedForEveryInputKind) {
    const Inputs& in = inputs();
    // Saved states to --resume from, one per input kind (budget batches save as files do).
    for (const std::string kind : {"hdf5", "tfrecord", "idx", "budget", "sqlite"}) {
        states()[kind] = in.dir + "/state_" + kind + ".json";
        Args a = base_args(kind);
        a.insert(a.end(), {"--stop-after-steps", "3", "--save-state", states()[kind], "-q"});
        const Outcome o = stage(a);
        ASSERT_EQ(o.rc, 0) << kind << ": " << o.error << o.output;
    }
    std::map<std::string, json> baseline;
    for (const auto& kind : kKinds) {
        const Outcome o = stage(base_args(kind));
        ASSERT_EQ(o.rc, 0) << kind << ": " << o.error << o.output;
        baseline[kind] = o.report;
    }
    // One schema: the same top-level keys in every mode, but the optional sections.
    const std::set<std::string> optional = {"budget",          "stream",        "resumed_from",
                                            "skipped_records", "skipped_bytes", "resync_rounds"};
    std::map<std::string, std::set<std::string>> keys;
    for (const auto& [kind, r] : baseline) {
        for (const auto& item : r.items()) {
            if (optional.count(item.key()) == 0) keys[kind].insert(item.key());
        }
    }
    for (const auto& kind : kKinds) {
        EXPECT_EQ(keys[kind], keys["hdf5"]) << kind << " report keys differ from a file run's";
        EXPECT_EQ(baseline[kind]["epochs"][0].size(),
                  baseline["hdf5"]["epochs"][0].size() + (kind == "budget" ? 1 : 0))
            << kind << " epoch keys differ from a file run's (budget adds \"budget\")";
    }

    mpistage::cli::CommandLine cl;
    const auto& table = spec();
    std::string matrix;
    for (const CLI::Option* option : cl.stage_command().get_options()) {
        const std::string flag = mpistage::cli::option_name(*option);
        if (flag == "--help" || flag == "files") continue;
        const auto entry = table.find(flag);
        if (entry == table.end()) {
            ADD_FAILURE() << "stage flag " << flag
                          << " has no entry in kSpec (tests/mpi/cli/test_stage_flags.cpp): "
                             "say what it does to each input, or refuse it";
            continue;
        }
        matrix += flag + ":";
        for (const auto& kind : kKinds) {
            const std::string work = in.dir + "/w_" + kind;
            Args a = base_args(kind);
            const Args extra = entry->second.args(kind, work);
            a.insert(a.end(), extra.begin(), extra.end());
            const Outcome o = stage(a);
            const std::string what = flag + " x " + kind;
            const bool refused = o.rc == 2 && o.error.rfind("ConfigError: ", 0) == 0 &&
                                 o.error.find(flag) != std::string::npos &&
                                 (o.error.find("does not apply") != std::string::npos ||
                                  o.error.find("does not combine") != std::string::npos ||
                                  o.error.find("counts the elements") != std::string::npos);
            // The same outcome on every rank.
            EXPECT_TRUE(h5t::same_on_all_ranks(h5t::fnv(o.error + std::to_string(o.rc))))
                << what << ": ranks differ: " << o.error;
            if (refused) {
                matrix += " " + kind + "=refused";
                EXPECT_TRUE(o.error.find(kind_word(kind) + " input") != std::string::npos ||
                            o.error.find("FILE input") != std::string::npos)
                    << what << ": the refusal does not name the input kind: " << o.error;
                EXPECT_FALSE(must_apply(flag, kind)) << what << ": must take effect: " << o.error;
                continue;
            }
            bool ok = false;
            try {
                const json none;
                ok = entry->second.effect(
                    Context{kind, o, o.report.is_null() ? none : o.report, baseline[kind], work});
            } catch (const std::exception& e) {
                ADD_FAILURE() << what << ": effect check threw " << e.what();
            }
            matrix += " " + kind + (ok ? "=effect" : "=IGNORED");
            EXPECT_TRUE(ok) << what << ": neither refused by name nor observably in effect (rc "
                            << o.rc << ", " << o.error << ")\n"
                            << o.output.substr(0, 3000);
        }
        matrix += "\n";
    }
    if (h5t::rank() == 0) std::printf("%s", matrix.c_str());
}

}  // namespace
