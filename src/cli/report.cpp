// The text report of `mpistage stage` (rank 0) and the per-rank totals behind it.
#include "cli/report.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>

#include "mpistage/config.hpp"

namespace mpistage::cli {

namespace {

using ull = unsigned long long;

void print_rank_table(const std::vector<RankTotals>& ranks) {
    std::printf(
        "per rank, all epochs (samples = valid samples; wait = seconds waiting for data, "
        "of which wait_io for this rank's reads and wait_peers for other ranks in "
        "collectives; moved = records the skew correction moved):\n");
    std::printf("%5s %10s %8s %14s %10s %10s %10s %12s %8s %8s %9s\n", "rank", "samples", "batches",
                "bytes", "MB/s", "wait_s", "wait_io_s", "wait_peers_s", "moved", "device",
                "H2D_GB/s");
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        const RankTotals& t = ranks[r];
        const std::string device = t.device < 0 ? "cpu" : "cuda:" + std::to_string(t.device);
        const std::string h2d =
            t.h2d_seconds > 0
                ? std::to_string(static_cast<double>(t.h2d_bytes) / t.h2d_seconds / 1e9)
                : "-";
        std::printf("%5zu %10llu %8llu %14llu %10.1f %10.3f %10.3f %12.3f %8llu %8s %9.9s\n", r,
                    static_cast<ull>(t.samples), static_cast<ull>(t.batches),
                    static_cast<ull>(t.bytes),
                    t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e6 : 0.0,
                    t.wait_seconds, t.wait_io_seconds, t.wait_peers_seconds,
                    static_cast<ull>(t.records_moved), device.c_str(), h2d.c_str());
    }
}

// Residual byte skew after the count-equalising skew correction (docs/architecture.md, "Balance").
void print_balance(const std::vector<RankTotals>& ranks) {
    std::uint64_t max_bytes = 0;
    std::uint64_t sum_bytes = 0;
    for (const auto& t : ranks) {
        max_bytes = std::max(max_bytes, t.bytes);
        sum_bytes += t.bytes;
    }
    const double mean = static_cast<double>(sum_bytes) / static_cast<double>(ranks.size());
    std::printf("balance: bytes per rank max/mean %.4f (max - mean = %.0f bytes)\n",
                mean > 0 ? static_cast<double>(max_bytes) / mean : 1.0,
                static_cast<double>(max_bytes) - mean);
}

void print_verdicts(const std::vector<EpochReport>& epochs, bool all_ok) {
    bool interrupted = false;
    for (const auto& r : epochs) {
        std::printf(
            "epoch %llu: %llu batches per rank, %llu valid samples, duplicates %llu, "
            "missing %llu%s\n",
            static_cast<ull>(r.epoch), static_cast<ull>(r.batches.front()),
            static_cast<ull>(r.expected), static_cast<ull>(r.duplicates),
            static_cast<ull>(r.missing), r.interrupted ? " (interrupted: consumed so far)" : "");
        if (r.resumed) {
            std::printf("  resumed epoch: %llu sample(s) of the interrupted run%s\n",
                        static_cast<ull>(r.prior_ids),
                        r.prior_ids > 0 ? " counted (its --verify id log)"
                                        : " not checked (it kept no --verify id log)");
        }
        interrupted = interrupted || r.interrupted;
    }
    if (epochs.empty()) std::printf("warning: no epoch was staged (--epochs 0)\n");
    for (const auto& r : epochs) {
        if (!r.batches.empty() && r.batches.front() == 0) {
            std::printf(
                "warning: epoch %llu yielded 0 batches per rank (under drop, batch size "
                "x ranks exceeds the samples)\n",
                static_cast<ull>(r.epoch));
        }
    }
    if (all_ok) {
        std::printf(interrupted ? "exactly-once so far: OK (no sample twice; the rest follows "
                                  "with --resume)\n"
                                : "exactly-once: OK\n");
        return;
    }
    std::string why;
    for (const auto& r : epochs) {
        if (r.ok) continue;
        why += "epoch " + std::to_string(r.epoch) + ": duplicates " + std::to_string(r.duplicates) +
               ", missing " + std::to_string(r.missing) + ", out of range " +
               std::to_string(r.out_of_range) + "; ";
    }
    std::printf("exactly-once: FAILED (%s)\n", why.c_str());
}

// The batches of each epoch: steps, real and padding batches, samples per batch, oversize.
void print_batches(const StageOutcome& o) {
    for (const auto& r : o.epochs) {
        const double mean = r.real_batches ? static_cast<double>(r.valid_samples) /
                                                 static_cast<double>(r.real_batches)
                                           : 0.0;
        std::printf(
            "epoch %llu: %llu steps on every rank (%llu batches, %llu padding steps, %llu padding "
            "slots), samples per batch min %llu mean %.1f max %llu, %llu oversize batches",
            static_cast<ull>(r.epoch), static_cast<ull>(r.steps), static_cast<ull>(r.real_batches),
            static_cast<ull>(r.padding_steps), static_cast<ull>(r.padding_slots),
            static_cast<ull>(r.min_batch_samples), mean, static_cast<ull>(r.max_batch_samples),
            static_cast<ull>(r.oversize));
        if (r.padding_waste >= 0) {
            std::printf(", padding waste %.1f%% (%.1f%% without bucketing)",
                        100.0 * r.padding_waste, 100.0 * r.unbucketed_padding_waste);
        }
        std::printf("\n");
        if (r.shuffle && r.shuffle->batches > 0) {
            const ShuffleFigure& f = *r.shuffle;
            std::printf(
                "epoch %llu: shuffle quality: %.1f of %llu blocks per batch (full shuffle "
                "%.1f), mean jump %.3f of N (full shuffle 0.333)",
                static_cast<ull>(r.epoch), f.blocks_per_batch, static_cast<ull>(f.blocks),
                f.full_shuffle_blocks_per_batch, f.mean_jump);
            if (f.chunk_samples > 0) {
                std::printf(", %.1f chunks of %llu samples per batch (full shuffle %.1f)",
                            f.chunks_per_batch, static_cast<ull>(f.chunk_samples),
                            f.full_shuffle_chunks_per_batch);
            }
            std::printf("\n");
        }
    }
}

// Per epoch: each rank's seconds and waits, and the rank the others waited for.
void print_waits(const std::vector<EpochReport>& epochs) {
    for (const auto& r : epochs) {
        if (r.waited_on_rank < 0) continue;
        std::printf(
            "epoch %llu: rank %d made the others wait the most (%.3f s of peer waits on "
            "the other ranks; per rank seconds/wait_io/wait_peers:",
            static_cast<ull>(r.epoch), r.waited_on_rank, r.others_waited_seconds);
        for (std::size_t k = 0; k < r.ranks.size(); ++k) {
            std::printf(" %zu: %.3f/%.3f/%.3f", k, r.ranks[k].seconds, r.ranks[k].wait_io_seconds,
                        r.ranks[k].wait_peers_seconds);
        }
        std::printf(")\n");
    }
}

}  // namespace

std::uint64_t statistic(const SourceStatistics& stats, const std::string& name) {
    for (const auto& s : stats) {
        if (s.name == name) return s.value;
    }
    return 0;
}

std::vector<RankTotals> gather_rank_totals(const Communicator& comm, const RankTotals& t) {
    // Times travel as microseconds so one allgather of uint64 carries every column.
    const auto us = [](double seconds) {
        return static_cast<std::uint64_t>(std::max(0.0, seconds) * 1e6);
    };
    const std::vector<std::uint64_t> mine = {t.samples,
                                             t.batches,
                                             t.padding_slots,
                                             t.bytes,
                                             us(t.seconds),
                                             us(t.wait_seconds),
                                             us(t.wait_io_seconds),
                                             us(t.wait_peers_seconds),
                                             t.records_moved,
                                             t.oversize,
                                             static_cast<std::uint64_t>(t.device + 1),  // 0 = CPU
                                             t.h2d_bytes,
                                             us(t.h2d_seconds),
                                             us(t.cpu_seconds),
                                             t.read_ahead_chunks,
                                             t.read_ahead_peak_bytes,
                                             t.read_ahead_over_budget,
                                             t.read_ahead_readers,
                                             us(t.read_ahead_wait_seconds)};
    const std::vector<std::uint64_t> all = comm.allgather(mine);
    std::vector<RankTotals> out(static_cast<std::size_t>(comm.size()));
    for (std::size_t r = 0; r < out.size(); ++r) {
        const std::uint64_t* v = all.data() + r * mine.size();
        out[r] = {v[0],
                  v[1],
                  v[2],
                  v[3],
                  v[4] / 1e6,
                  v[5] / 1e6,
                  v[6] / 1e6,
                  v[7] / 1e6,
                  v[8],
                  v[9],
                  static_cast<int>(v[10]) - 1,
                  v[11],
                  v[12] / 1e6,
                  v[13] / 1e6,
                  v[14],
                  v[15],
                  v[16],
                  v[17],
                  v[18] / 1e6};
    }
    return out;
}

void note_epoch_ranks(const Communicator& comm, const RankTotals& before, const RankTotals& after,
                      double seconds, EpochReport& r) {
    RankTotals d;
    d.seconds = seconds;
    d.wait_seconds = after.wait_seconds - before.wait_seconds;
    d.wait_io_seconds = after.wait_io_seconds - before.wait_io_seconds;
    d.wait_peers_seconds = after.wait_peers_seconds - before.wait_peers_seconds;
    const std::vector<RankTotals> all = gather_rank_totals(comm, d);
    r.ranks.clear();
    double most_busy = -1;
    double peer_waits = 0;
    for (std::size_t k = 0; k < all.size(); ++k) {
        const RankTotals& t = all[k];
        r.ranks.push_back({t.seconds, t.wait_seconds, t.wait_io_seconds, t.wait_peers_seconds});
        peer_waits += t.wait_peers_seconds;
        const double busy = t.seconds - t.wait_peers_seconds;
        if (busy > most_busy) {
            most_busy = busy;
            r.waited_on_rank = static_cast<int>(k);
        }
    }
    if (all.size() < 2) {
        r.waited_on_rank = -1;
        return;
    }
    r.others_waited_seconds =
        peer_waits - all[static_cast<std::size_t>(r.waited_on_rank)].wait_peers_seconds;
}

std::vector<std::string> gather_host_names(const Communicator& comm) {
    char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int length = 0;
    if (MPI_Get_processor_name(name, &length) != MPI_SUCCESS) length = 0;
    std::vector<char> mine(name, name + length);
    mine.push_back('\0');
    const std::vector<char> all = comm.gatherv(mine, 0);
    std::vector<std::string> out;
    for (std::size_t at = 0; at < all.size();) {
        const std::string host(all.data() + at);
        at += host.size() + 1;
        out.push_back(host.empty() ? "unknown" : host);
    }
    return out;
}

void print_header(const StageArgs& a, const StageOutcome& o) {
    const std::string batches =
        o.batching == "budget"
            ? "budget " +
                  (a.batch_tokens > 0 ? std::to_string(a.batch_tokens) + " tokens"
                                      : std::to_string(a.batch_bytes) + " bytes") +
                  " (at most " + std::to_string(o.batch_size) + " samples)"
            : "batch " + std::to_string(o.batch_size);
    std::printf(
        "mpistage %s: %s input, %llu samples, %d ranks, %s, shuffle %s, remainder %s, "
        "sharding %s, %llu epoch(s)\n",
        MPISTAGE_VERSION, o.input_kind.c_str(), static_cast<ull>(o.num_samples), o.world_size,
        batches.c_str(), o.shuffle.c_str(), o.remainder.c_str(), o.sharding.c_str(),
        static_cast<ull>(a.epochs));
    for (const auto& f : o.fields) {
        std::string shape;
        for (auto d : f.sample_shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
        std::printf("  field %-12s %-8s [B%s%s]%s\n", f.name.c_str(), dtype_name(f.dtype).c_str(),
                    shape.empty() ? "" : ",", shape.c_str(), f.ragged ? " ragged" : "");
    }
    for (const auto& n : o.source_notes) std::printf("  note: %s\n", n.c_str());
    if (!o.resume_note.empty()) std::printf("  %s\n", o.resume_note.c_str());
    if (statistic(o.source, "skipped_records") > 0) {
        std::printf("  skipped %llu corrupt record(s), %llu byte(s) (--on-corrupt skip)\n",
                    static_cast<ull>(statistic(o.source, "skipped_records")),
                    static_cast<ull>(statistic(o.source, "skipped_bytes")));
    }
    std::fflush(stdout);
}

void print_summary(const StageArgs& a, const StageOutcome& o) {
    print_rank_table(o.ranks);
    print_balance(o.ranks);
    for (const auto& r : o.epochs) {
        if (r.step_ratio_worst <= 0) continue;
        std::printf(
            "epoch %llu: bytes per rank per step max/mean: worst %.4f, mean %.4f "
            "(unbalanced slices: worst %.4f, mean %.4f)\n",
            static_cast<ull>(r.epoch), r.step_ratio_worst, r.step_ratio_mean, r.unbalanced_worst,
            r.unbalanced_mean);
    }
    print_batches(o);
    print_waits(o.epochs);
    print_tier(o.tier, o.epochs);
    if (a.verify) print_verdicts(o.epochs, o.all_ok);
    if (!o.stopped_by_signal.empty()) {
        std::printf("stopped by SIG%s after %llu step(s) on every rank at %s (exit code 75)\n",
                    o.stopped_by_signal.c_str(), static_cast<ull>(o.stopped_after),
                    o.state_note.c_str());
    } else if (o.stopped_after > 0) {
        std::printf("stopped after %llu step(s) (--stop-after-steps) at %s\n",
                    static_cast<ull>(o.stopped_after), o.state_note.c_str());
    }
    if (!a.save_state.empty()) {
        std::printf("state saved to %s: %s\n", a.save_state.c_str(), o.state_note.c_str());
    }
    std::fflush(stdout);
}

std::string error_kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::config:
            return "ConfigError";
        case ErrorKind::io:
            return "IoError";
        case ErrorKind::format:
            return "FormatError";
        case ErrorKind::mpi:
            return "MpiError";
        case ErrorKind::hdf5:
            return "Hdf5Error";
        case ErrorKind::cuda:
            return "CudaError";
        case ErrorKind::generic:
            break;
    }
    return "Error";
}

}  // namespace mpistage::cli
