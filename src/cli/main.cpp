// The `mpistage` executable: stage (the main job), convert.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/convert.hpp"
#include "mpistage/config.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/raw_source.hpp"
#include "mpistage/tf_example.hpp"
#include "mpistage/tfrecord_source.hpp"
#if MPISTAGE_HAVE_TORCH
#include "mpistage/torch.hpp"
#endif

namespace mpistage::cli {

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
    bool verify = false;
    std::string json;
    bool quiet = false;
    std::vector<std::string> index_paths;
    std::vector<std::string> features;
    std::string on_corrupt = "error";
};

namespace {

bool looks_like_hdf5(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char sig[8] = {0};
    in.read(sig, 8);
    return in.gcount() == 8 && std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0;
}

bool looks_like_idx(const std::string& path) {
    return path.find("idx") != std::string::npos || path.find("ubyte") != std::string::npos;
}

bool looks_like_tfrecord(const std::string& path) {
    for (const char* s : {".tfrecord", ".tfrecords", ".tfr"}) {
        if (path.find(s) != std::string::npos) return true;
    }
    // Whole-file gzip TFRecords (TensorFlow, Beam, TFX) usually end in .gz without a hint.
    return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0 &&
           !looks_like_idx(path);
}

std::unique_ptr<Source> open_source(const Communicator& comm, const StageArgs& a) {
    std::string format = a.format;
    if (format == "auto") {
        format = looks_like_hdf5(a.files.front())       ? "hdf5"
                 : looks_like_tfrecord(a.files.front()) ? "tfrecord"
                 : looks_like_idx(a.files.front())      ? "idx"
                                                        : "hdf5";
    }
    if (format == "hdf5") {
        if (a.files.size() != 1) {
            throw ConfigError("stage: the HDF5 source reads one file; got " +
                              std::to_string(a.files.size()));
        }
        Hdf5Options o;
        o.fields = a.fields;
        return std::make_unique<Hdf5Source>(comm, a.files.front(), o);
    }
    if (format == "idx") {
        std::vector<RawField> fields;
        LocalStatus status;
        try {
            for (std::size_t i = 0; i < a.files.size(); ++i) {
                const std::string name = i < a.fields.size() ? a.fields[i] : "field" + std::to_string(i);
                fields.push_back(parse_idx_header(a.files[i], name));
            }
        } catch (...) {
            status = LocalStatus::from_current_exception();
        }
        agree_or_throw(comm, status);
        return std::make_unique<RawSource>(comm, fields);
    }
    if (format == "tfrecord") {
        TfRecordOptions o;
        LocalStatus status;
        try {
            o.index_paths = a.index_paths;
            o.on_corrupt = parse_on_corrupt(a.on_corrupt);
            for (const auto& f : a.features) o.features.push_back(parse_feature_spec(f));
            o.validate();
        } catch (...) {
            status = LocalStatus::from_current_exception();
        }
        agree_or_throw(comm, status);
        return std::make_unique<TfRecordSource>(comm, a.files, o);
    }
    throw ConfigError("stage: unknown --format '" + format +
                      "' (expected auto, hdf5, idx or tfrecord)");
}

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : " ") + x;
    return out;
}

// Every flag that decides which collectives a rank makes, or what it stages, must be equal on
// all ranks. One allgather of their hashes; on a mismatch every rank builds the same message.
void check_same_arguments(const Communicator& comm, const StageArgs& a) {
    const std::vector<std::pair<const char*, std::string>> args = {
        {"FILE", join(a.files)},
        {"--field", join(a.fields)},
        {"--format", a.format},
        {"--batch-size", std::to_string(a.batch_size)},
        {"--epochs", std::to_string(a.epochs)},
        {"--first-epoch", std::to_string(a.first_epoch)},
        {"--shuffle", a.shuffle},
        {"--sharding", a.sharding},
        {"--seed", std::to_string(a.seed)},
        {"--remainder", a.remainder},
        {"--verify", a.verify ? "on" : "off"},
        {"--json", a.json.empty() ? "(none)" : "(given)"},
        {"--index", join(a.index_paths)},
        {"--feature", join(a.features)},
        {"--on-corrupt", a.on_corrupt},
    };
    const std::size_t k = args.size();
    std::vector<std::uint64_t> mine(k);
    for (std::size_t i = 0; i < k; ++i) mine[i] = fnv1a64(args[i].second);
    std::vector<std::uint64_t> all(k * static_cast<std::size_t>(comm.size()));
    check_mpi(MPI_Allgather(mine.data(), static_cast<int>(k), MPI_UINT64_T, all.data(),
                            static_cast<int>(k), MPI_UINT64_T, comm.get()),
              "MPI_Allgather(argument hashes)");
    for (std::size_t i = 0; i < k; ++i) {
        for (int r = 1; r < comm.size(); ++r) {
            if (all[static_cast<std::size_t>(r) * k + i] == all[i]) continue;
            const std::string v0 = comm.broadcast(args[i].second, 0);
            const std::string vr = comm.broadcast(args[i].second, r);
            throw ConfigError(std::string("stage: ranks were given different arguments: ") +
                              args[i].first + " is '" + v0 + "' on rank 0 but '" + vr +
                              "' on rank " + std::to_string(r) +
                              "; every rank must run the same command");
        }
    }
}

struct EpochReport {
    std::uint64_t epoch = 0;
    std::vector<std::uint64_t> batches;
    std::vector<std::uint64_t> valid;
    std::uint64_t duplicates = 0;
    std::uint64_t missing = 0;
    std::uint64_t out_of_range = 0;
    std::uint64_t expected = 0;
    bool ok = true;
};

// Gathers the valid ids of every rank on rank 0 and counts each id; the verdict is broadcast.
EpochReport verify_epoch(const Communicator& comm, std::uint64_t epoch,
                         const std::vector<std::int64_t>& ids, std::uint64_t batches,
                         std::uint64_t num_samples, const EpochTotals& totals, bool drop) {
    EpochReport r;
    r.epoch = epoch;
    r.batches = comm.allgather(batches);
    r.valid = comm.allgather(ids.size());
    std::vector<int> counts(static_cast<std::size_t>(comm.size()));
    std::vector<int> displs(counts.size());
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        counts[i] = static_cast<int>(r.valid[i]);
        displs[i] = static_cast<int>(total);
        total += r.valid[i];
    }
    if (total > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
        throw ConfigError("stage: --verify gathers the valid ids of an epoch on rank 0 and supports "
                          "at most 2^31-1 of them; this epoch has " + std::to_string(total));
    }
    std::vector<std::int64_t> all(comm.rank() == 0 ? total : 0);
    check_mpi(MPI_Gatherv(ids.data(), static_cast<int>(ids.size()), MPI_INT64_T, all.data(),
                          counts.data(), displs.data(), MPI_INT64_T, 0, comm.get()),
              "MPI_Gatherv(valid ids)");
    std::uint64_t verdict[4] = {0, 0, 0, 0};
    if (comm.rank() == 0) {
        std::vector<std::uint32_t> seen(num_samples, 0);
        for (auto id : all) {
            if (id < 0 || static_cast<std::uint64_t>(id) >= num_samples) {
                ++verdict[2];
                continue;
            }
            if (++seen[static_cast<std::size_t>(id)] > 1) ++verdict[0];
        }
        std::uint64_t unique = 0;
        for (auto c : seen) unique += c > 0;
        const std::uint64_t expected = drop ? totals.valid_samples : num_samples;
        verdict[1] = expected > unique ? expected - unique : 0;
        verdict[3] = unique;
    }
    check_mpi(MPI_Bcast(verdict, 4, MPI_UINT64_T, 0, comm.get()), "MPI_Bcast(verdict)");
    r.duplicates = verdict[0];
    r.missing = verdict[1];
    r.out_of_range = verdict[2];
    r.expected = drop ? totals.valid_samples : num_samples;
    const bool equal_steps =
        std::all_of(r.batches.begin(), r.batches.end(), [&](auto b) { return b == r.batches[0]; });
    r.ok = equal_steps && r.duplicates == 0 && r.missing == 0 && r.out_of_range == 0 &&
           verdict[3] == r.expected;
    return r;
}

}  // namespace

int run_stage(const StageArgs& a) {
    const Communicator comm(MPI_COMM_WORLD);
    check_same_arguments(comm, a);
    run_agreed(comm, [&] {
        if (a.first_epoch + a.epochs < a.first_epoch) {
            throw ConfigError("stage: --first-epoch + --epochs overflows 64 bits");
        }
        if (!a.json.empty() && comm.rank() == 0) {
            std::ofstream probe(a.json, std::ios::app);
            if (!probe) throw IoError("stage: cannot write --json file '" + a.json + "'");
        }
    });
    auto source = open_source(comm, a);
    LoaderOptions opts;
    opts.plan.batch_size = a.batch_size;
    opts.plan.seed = a.seed;
    opts.plan.shuffle = parse_shuffle(a.shuffle);
    opts.plan.sharding = parse_sharding(a.sharding);
    opts.plan.remainder = parse_remainder(a.remainder);
    opts.prefetch = a.prefetch;
    opts.io_threads = a.threads;
    Loader loader(comm, *source, opts);
    const bool drop = opts.plan.remainder == Remainder::drop;

    if (comm.rank() == 0 && !a.quiet) {
        std::printf("mpistage %s: %llu samples, %d ranks, batch %llu, shuffle %s, remainder %s, "
                    "sharding %s, %llu epoch(s)\n",
                    MPISTAGE_VERSION, static_cast<unsigned long long>(loader.num_samples()),
                    comm.size(), static_cast<unsigned long long>(a.batch_size), a.shuffle.c_str(),
                    a.remainder.c_str(), a.sharding.c_str(),
                    static_cast<unsigned long long>(a.epochs));
        for (const auto& f : source->fields()) {
            std::string shape;
            for (auto d : f.sample_shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
            std::printf("  field %-12s %-8s [B%s%s]%s\n", f.name.c_str(), dtype_name(f.dtype).c_str(),
                        shape.empty() ? "" : ",", shape.c_str(), f.ragged ? " ragged" : "");
        }
        if (const auto* tfr = dynamic_cast<const TfRecordSource*>(source.get())) {
            if (tfr->skipped_records() > 0) {
                std::printf("  skipped %llu corrupt record(s) (--on-corrupt skip)\n",
                            static_cast<unsigned long long>(tfr->skipped_records()));
            }
        }
        std::fflush(stdout);
    }

    std::vector<EpochReport> reports;
    bool all_ok = true;
    for (std::uint64_t e = a.first_epoch; e < a.first_epoch + a.epochs; ++e) {
        std::vector<std::int64_t> valid_ids;
        std::uint64_t batches = 0;
        auto range = loader.epoch(e);
        for (const HostBatch& batch : range) {
            ++batches;
#if MPISTAGE_HAVE_TORCH
            const TorchBatch tb = to_torch(batch);
            if (tb.index.size(0) != static_cast<std::int64_t>(a.batch_size)) {
                throw Error("stage: batch tensor has " + std::to_string(tb.index.size(0)) + " rows");
            }
#endif
            if (a.verify) {
                for (std::size_t j = 0; j < batch.size(); ++j) {
                    if (batch.valid()[j]) valid_ids.push_back(batch.index()[j]);
                }
            }
        }
        if (a.verify || !a.json.empty()) {
            if (!a.verify) valid_ids.clear();
            EpochReport r = a.verify ? verify_epoch(comm, e, valid_ids, batches,
                                                    loader.num_samples(), loader.totals(), drop)
                                     : EpochReport{};
            if (!a.verify) {
                r.epoch = e;
                r.batches = comm.allgather(batches);
            }
            all_ok = all_ok && r.ok;
            reports.push_back(r);
        }
    }

    // Per-rank table on rank 0.
    const LoaderStats& s = loader.stats();
    const double secs = s.epoch_time.count();
    const auto samples = comm.allgather(s.valid_samples);
    const auto batches = comm.allgather(s.batches);
    const auto bytes = comm.allgather(s.bytes_read);
    const auto micros = comm.allgather(static_cast<std::uint64_t>(secs * 1e6));
    const auto wait_us = comm.allgather(static_cast<std::uint64_t>(s.wait_time.count() * 1e6));
    const auto moved = comm.allgather(s.records_moved);
    if (comm.rank() == 0 && !a.quiet) {
        std::printf("per rank, all epochs (samples = valid samples; moved = records the skew "
                    "correction moved):\n");
        std::printf("%5s %10s %8s %14s %10s %10s %8s\n", "rank", "samples", "batches", "bytes",
                    "MB/s", "wait_s", "moved");
        for (int r = 0; r < comm.size(); ++r) {
            const auto i = static_cast<std::size_t>(r);
            const double t = static_cast<double>(micros[i]) / 1e6;
            std::printf("%5d %10llu %8llu %14llu %10.1f %10.3f %8llu\n", r,
                        static_cast<unsigned long long>(samples[i]),
                        static_cast<unsigned long long>(batches[i]),
                        static_cast<unsigned long long>(bytes[i]),
                        t > 0 ? static_cast<double>(bytes[i]) / t / 1e6 : 0.0,
                        static_cast<double>(wait_us[i]) / 1e6,
                        static_cast<unsigned long long>(moved[i]));
        }
        {
            // Residual byte skew after the count-equalising skew correction (DESIGN.md "Balance").
            std::uint64_t max_bytes = 0;
            std::uint64_t sum_bytes = 0;
            for (auto b : bytes) {
                max_bytes = std::max(max_bytes, b);
                sum_bytes += b;
            }
            const double mean = static_cast<double>(sum_bytes) / comm.size();
            std::printf("balance: bytes per rank max/mean %.4f (max - mean = %.0f bytes)\n",
                        mean > 0 ? static_cast<double>(max_bytes) / mean : 1.0,
                        static_cast<double>(max_bytes) - mean);
        }
        if (a.verify) {
            for (const auto& r : reports) {
                std::printf("epoch %llu: %llu batches per rank, %llu valid samples, "
                            "duplicates %llu, missing %llu\n",
                            static_cast<unsigned long long>(r.epoch),
                            static_cast<unsigned long long>(r.batches.front()),
                            static_cast<unsigned long long>(r.expected),
                            static_cast<unsigned long long>(r.duplicates),
                            static_cast<unsigned long long>(r.missing));
            }
            if (reports.empty()) {
                std::printf("warning: no epoch was staged (--epochs 0)\n");
            }
            for (const auto& r : reports) {
                if (!r.batches.empty() && r.batches.front() == 0) {
                    std::printf("warning: epoch %llu yielded 0 batches per rank (under drop, "
                                "batch size x ranks exceeds the samples)\n",
                                static_cast<unsigned long long>(r.epoch));
                }
            }
            if (all_ok) {
                std::printf("exactly-once: OK\n");
            } else {
                std::string why;
                for (const auto& r : reports) {
                    if (r.ok) continue;
                    why += "epoch " + std::to_string(r.epoch) + ": duplicates " +
                           std::to_string(r.duplicates) + ", missing " + std::to_string(r.missing) +
                           ", out of range " + std::to_string(r.out_of_range) + "; ";
                }
                std::printf("exactly-once: FAILED (%s)\n", why.c_str());
            }
        }
        std::fflush(stdout);
    }
    if (!a.json.empty() && comm.rank() == 0) {
        nlohmann::json j;
        j["world_size"] = comm.size();
        j["num_samples"] = loader.num_samples();
        j["batch_size"] = a.batch_size;
        j["remainder"] = a.remainder;
        j["shuffle"] = a.shuffle;
        j["sharding"] = a.sharding;
        if (const auto* tfr = dynamic_cast<const TfRecordSource*>(source.get())) {
            j["skipped_records"] = tfr->skipped_records();
        }
        j["epochs"] = nlohmann::json::array();
        for (const auto& r : reports) {
            nlohmann::json e;
            e["epoch"] = r.epoch;
            e["batches_per_rank"] = r.batches;
            if (a.verify) {
                e["valid_samples_per_rank"] = r.valid;
                e["duplicates"] = r.duplicates;
                e["missing"] = r.missing;
                e["out_of_range"] = r.out_of_range;
                e["exactly_once"] = r.ok;
            }
            j["epochs"].push_back(e);
        }
        nlohmann::json ranks = nlohmann::json::array();
        for (int r = 0; r < comm.size(); ++r) {
            const auto i = static_cast<std::size_t>(r);
            ranks.push_back({{"rank", r}, {"samples", samples[i]}, {"batches", batches[i]},
                             {"bytes", bytes[i]}, {"seconds", static_cast<double>(micros[i]) / 1e6},
                             {"wait_seconds", static_cast<double>(wait_us[i]) / 1e6},
                             {"records_moved", moved[i]}});
        }
        j["ranks"] = ranks;
        std::ofstream out(a.json);
        out << j.dump(2) << "\n";
        if (!out) throw IoError("stage: cannot write --json file '" + a.json + "'");
    }
    return a.verify && !all_ok ? 1 : 0;
}

}  // namespace mpistage::cli

int main(int argc, char** argv) {
    using namespace mpistage;
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    CLI::App app{"mpistage: MPI-native staging of training data (HDF5, TFRecord, IDX) into "
                 "batches"};
    app.require_subcommand(1);
    // A flag given twice takes its last value, so wrapper scripts can append overrides.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.set_version_flag("--version", MPISTAGE_VERSION);

    cli::StageArgs sa;
    auto* stage = app.add_subcommand("stage", "Shard FILE(s) across the MPI ranks and stage batches");
    stage->add_option("files", sa.files, "Input file(s): one HDF5 file, or IDX files (one per field)")
        ->required()->check(CLI::ExistingFile);
    stage->add_option("--field", sa.fields, "Field (HDF5 dataset) to stage; repeat for several. "
                      "Default: all datasets aligned on dimension 0");
    stage->add_option("--format", sa.format, "auto, hdf5, idx or tfrecord (auto: HDF5 signature, "
                      ".tfrecord/.gz names, IDX names)")->capture_default_str();
    stage->add_option("--index", sa.index_paths, "TFRecord: DALI index file per data file "
                      "(\"<offset> <size>\" lines), validated against the data");
    stage->add_option("--feature", sa.features, "TFRecord: decode tf.train.Example feature "
                      "NAME:TYPE[:SHAPE], TYPE bytes|float|int64|bytes/DTYPE (e.g. "
                      "image:bytes/uint8:28x28, label:int64). Default: raw record bytes");
    stage->add_option("--on-corrupt", sa.on_corrupt, "TFRecord: error (fail on every rank naming "
                      "file and offset) or skip (drop bad records, agreed by all ranks)")
        ->capture_default_str();
    stage->add_option("--batch-size,-b", sa.batch_size, "Samples per batch on each rank")->capture_default_str();
    stage->add_option("--epochs,-e", sa.epochs, "Epochs to stage")->capture_default_str();
    stage->add_option("--first-epoch", sa.first_epoch, "Number of the first epoch")->capture_default_str();
    stage->add_option("--shuffle", sa.shuffle, "none, local (byte_range) or global (global sharding)")
        ->capture_default_str();
    stage->add_option("--sharding", sa.sharding, "byte_range or global")->capture_default_str();
    stage->add_option("--seed", sa.seed, "Shuffle seed")->capture_default_str();
    stage->add_option("--remainder", sa.remainder, "drop, pad or mask")->capture_default_str();
    stage->add_option("--prefetch", sa.prefetch, "Batches read ahead (ring depth)")->capture_default_str();
    stage->add_option("--threads", sa.threads, "Background I/O threads (0 = read on the caller)")
        ->capture_default_str();
    stage->add_flag("--verify", sa.verify, "Check that every sample is yielded exactly once per "
                    "epoch with equal batch counts; exit 1 otherwise");
    stage->add_option("--json", sa.json, "Write a JSON report to this file (rank 0)");
    stage->add_flag("--quiet,-q", sa.quiet, "Print nothing but errors");

    std::string conv_images, conv_labels, conv_out;
    std::uint64_t chunk_rows = 0;
    int gzip_level = 0;
    auto* convert = app.add_subcommand("convert", "Convert data to a format mpistage stages");
    convert->require_subcommand(1);
    auto* conv_idx = convert->add_subcommand("idx", "IDX images + labels (.gz or plain) to HDF5 "
                                              "datasets 'images' and 'labels', or to TFRecord "
                                              "tf.train.Example (image bytes, label int64)");
    conv_idx->add_option("images", conv_images, "IDX images file")->required()->check(CLI::ExistingFile);
    conv_idx->add_option("labels", conv_labels, "IDX labels file")->required()->check(CLI::ExistingFile);
    conv_idx->add_option("-o,--output", conv_out, "Output HDF5 file")->required();
    conv_idx->add_option("--chunk-rows", chunk_rows, "Write chunked datasets with this many rows "
                         "per chunk (0 = contiguous)")->capture_default_str();
    conv_idx->add_option("--gzip", gzip_level, "gzip level for chunked datasets (0 = none)")
        ->capture_default_str();
    std::string conv_format = "hdf5";
    conv_idx->add_option("--format", conv_format, "hdf5 (datasets images, labels) or tfrecord "
                         "(tf.train.Example: image bytes, label int64)")->capture_default_str();

    std::vector<std::string> index_files;
    std::vector<std::string> index_out;
    auto* index = app.add_subcommand("index", "Write DALI-compatible index files of TFRecord "
                                     "files, scanning in parallel (one FILE.idx per FILE)");
    index->add_option("files", index_files, "TFRecord files")->required()->check(CLI::ExistingFile);
    index->add_option("-o,--output", index_out, "Index paths (default: FILE.idx)");

    int rc = 0;
    try {
        // Parse on every rank, then agree: a parse error on one rank (a wrapper script passing
        // it other flags, a file missing on one node) fails every rank instead of hanging them.
        int outcome = 0;  // 0 parsed, 1 help/version printed, 2 error
        std::string parse_error;
        try {
            app.parse(argc, argv);
        } catch (const CLI::CallForHelp& e) {
            outcome = 1;
            if (rank == 0) app.exit(e);
        } catch (const CLI::CallForAllHelp& e) {
            outcome = 1;
            if (rank == 0) app.exit(e);
        } catch (const CLI::CallForVersion& e) {
            outcome = 1;
            if (rank == 0) app.exit(e);
        } catch (const CLI::ParseError& e) {
            outcome = 2;
            parse_error = std::string(e.what()) + " (see --help)";
        }
        {
            const Communicator comm(MPI_COMM_WORLD);
            LocalStatus status;
            status.failed = outcome == 2;
            status.kind = ErrorKind::config;
            status.message = parse_error;
            agree_or_throw(comm, status);
            const auto lo = comm.allreduce_min(static_cast<std::uint64_t>(outcome));
            const auto hi = comm.allreduce_max(static_cast<std::uint64_t>(outcome));
            if (lo != hi) {
                throw ConfigError("ranks were given different arguments: --help or --version on "
                                  "some ranks only; every rank must run the same command");
            }
            if (hi == 1) {
                MPI_Finalize();
                return 0;
            }
            // The subcommand decides every collective that follows: it must be the same.
            const std::string which = stage->parsed()      ? "stage"
                                      : conv_idx->parsed() ? "convert idx"
                                      : index->parsed()    ? "index"
                                                           : "(none)";
            const auto h = fnv1a64(which);
            if (comm.allreduce_min(h) != comm.allreduce_max(h)) {
                const std::string first = comm.broadcast(which, 0);
                throw ConfigError("ranks were given different subcommands ('" + first +
                                  "' on rank 0, another elsewhere); every rank must run the "
                                  "same command");
            }
        }
        if (stage->parsed()) {
            rc = cli::run_stage(sa);
        } else if (conv_idx->parsed()) {
            Communicator comm(MPI_COMM_WORLD);
            run_agreed(comm, [&] {
                if (comm.rank() == 0) {
                    const auto images = read_idx_any(conv_images);
                    const auto labels = read_idx_any(conv_labels);
                    if (conv_format == "tfrecord") {
                        write_idx_tfrecord(images, labels, conv_out);
                    } else if (conv_format == "hdf5") {
                        write_idx_hdf5(images, labels, conv_out, chunk_rows, gzip_level);
                    } else {
                        throw ConfigError("convert: unknown --format '" + conv_format +
                                          "' (expected hdf5 or tfrecord)");
                    }
                    std::printf("wrote %s: images [%llu...] %s, labels [%llu] %s\n", conv_out.c_str(),
                                static_cast<unsigned long long>(images.dims[0]),
                                dtype_name(images.dtype).c_str(),
                                static_cast<unsigned long long>(labels.dims[0]),
                                dtype_name(labels.dtype).c_str());
                }
            });
        } else if (index->parsed()) {
            Communicator comm(MPI_COMM_WORLD);
            if (index_out.empty()) {
                for (const auto& f : index_files) index_out.push_back(f + ".idx");
            }
            write_dali_index(comm, index_files, index_out);
            if (comm.rank() == 0) {
                for (const auto& f : index_out) std::printf("wrote %s\n", f.c_str());
            }
        }
    } catch (const Error& e) {
        const char* kind = "Error";
        switch (e.kind()) {
        case ErrorKind::config: kind = "ConfigError"; break;
        case ErrorKind::io: kind = "IoError"; break;
        case ErrorKind::format: kind = "FormatError"; break;
        case ErrorKind::mpi: kind = "MpiError"; break;
        case ErrorKind::hdf5: kind = "Hdf5Error"; break;
        case ErrorKind::cuda: kind = "CudaError"; break;
        default: break;
        }
        std::fprintf(stderr, "mpistage: rank %d: %s: %s\n", rank, kind, e.what());
        rc = 2;
    } catch (const std::exception& e) {
        // Not agreed between ranks: abort the job rather than leave others hanging.
        std::fprintf(stderr, "mpistage: rank %d: fatal: %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Finalize();
    return rc;
}
