#include "cli/tier_report.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace mpistage::cli {

namespace {

std::uint64_t micros(std::chrono::duration<double> d) {
    return static_cast<std::uint64_t>(std::max(0.0, d.count()) * 1e6);
}

/// Bytes per second of `bytes` in `seconds` (0 when no time was measured).
double rate(std::uint64_t bytes, double seconds) {
    return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
}

}  // namespace

TierSummary gather_tier(const Communicator& comm, const std::string& stage,
                        const LoaderStats& stats) {
    TierSummary t;
    t.stage = stage;
    t.tier = stats.tier;
    t.note = comm.broadcast(stats.tier_note, 0);
    t.staged_bytes = comm.allreduce_sum(stats.staged_bytes);
    t.staged_bytes_max = comm.allreduce_max(stats.staged_bytes);
    t.stage_seconds = static_cast<double>(comm.allreduce_max(micros(stats.stage_time))) / 1e6;
    t.populate_seconds =
        static_cast<double>(comm.allreduce_max(micros(stats.stage_populate_time))) / 1e6;
    t.read_seconds = static_cast<double>(comm.allreduce_max(micros(stats.stage_read_time))) / 1e6;
    t.map_node_seconds =
        static_cast<double>(comm.allreduce_max(micros(stats.stage_map_node_time))) / 1e6;
    t.read_method = stats.stage_read_method;  // agreed: the same on every rank
    t.read_note = stats.stage_read_note;      // agreed
    t.two_phase = stats.two_phase;            // agreed at construction
    t.two_phase_note = comm.broadcast(stats.two_phase_note, 0);
    t.shuffle_note = stats.shuffle_note;  // agreed: the same on every rank
    t.two_phase_plain_step_seconds = stats.two_phase_plain_step_seconds;
    t.two_phase_step_seconds = stats.two_phase_step_seconds;
    return t;
}

void note_epoch_tier(const Communicator& comm, const LoaderStats& stats,
                     std::chrono::duration<double> elapsed, EpochReport& r) {
    r.tier = stats.tier;
    r.seconds = static_cast<double>(comm.allreduce_max(micros(elapsed))) / 1e6;
}

void print_tier(const TierSummary& t, const std::vector<EpochReport>& epochs) {
    std::printf("stage %s: epochs served from %s", t.stage.c_str(), t.tier.c_str());
    if (t.tier == "memory") {
        std::printf(
            " (%llu bytes staged in node memory, at most %llu per rank, read in "
            "%.3f s)",
            static_cast<unsigned long long>(t.staged_bytes),
            static_cast<unsigned long long>(t.staged_bytes_max), t.stage_seconds);
        std::printf(
            "\n  staging %.1f MB/s (all ranks); %s read of the files %.3f s (%.1f MB/s), "
            "pages mapped %.3f s, node's shards mapped for reading %.3f s",
            rate(t.staged_bytes, t.stage_seconds) / 1e6, t.read_method.c_str(), t.read_seconds,
            rate(t.staged_bytes, t.read_seconds) / 1e6, t.populate_seconds, t.map_node_seconds);
        if (!t.read_note.empty()) std::printf("\n  %s", t.read_note.c_str());
    }
    if (t.two_phase) std::printf(" (two-phase reads: slab reads + one exchange per step)");
    std::printf("\n");
    if (!t.note.empty()) std::printf("  %s\n", t.note.c_str());
    if (!t.two_phase_note.empty()) std::printf("  %s\n", t.two_phase_note.c_str());
    if (!t.shuffle_note.empty()) std::printf("  shuffle: %s\n", t.shuffle_note.c_str());
    for (const auto& r : epochs) {
        std::printf("  epoch %llu: tier %s, %.6f s (slowest rank)\n",
                    static_cast<unsigned long long>(r.epoch), r.tier.c_str(), r.seconds);
    }
}

nlohmann::json tier_json(const TierSummary& t) {
    return {{"option", t.stage},
            {"tier", t.tier},
            {"note", t.note},
            {"staged_bytes", t.staged_bytes},
            {"staged_bytes_max_rank", t.staged_bytes_max},
            {"stage_seconds", t.stage_seconds},
            {"stage_bytes_per_second", rate(t.staged_bytes, t.stage_seconds)},
            {"read_method", t.read_method},
            {"read_note", t.read_note},
            {"read_seconds", t.read_seconds},
            {"read_bytes_per_second", rate(t.staged_bytes, t.read_seconds)},
            {"populate_seconds", t.populate_seconds},
            {"map_node_seconds", t.map_node_seconds},
            {"shuffle_note", t.shuffle_note},
            {"two_phase",
             {{"option", t.two_phase_option},
              {"chosen", t.two_phase},
              {"note", t.two_phase_note},
              {"plain_step_seconds", t.two_phase_plain_step_seconds},
              {"two_phase_step_seconds", t.two_phase_step_seconds}}}};
}

}  // namespace mpistage::cli
