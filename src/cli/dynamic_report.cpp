// The report of `mpistage stage FILE --batch-bytes N` (see dynamic_report.hpp).
#include "cli/dynamic_report.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/atomic_file.hpp"

namespace mpistage::cli {

namespace {

using ull = unsigned long long;

constexpr std::size_t kRankWords = 7;

double mean_of(std::uint64_t samples, std::uint64_t batches) {
    return batches == 0 ? 0.0 : static_cast<double>(samples) / static_cast<double>(batches);
}

nlohmann::json epoch_json(const DynamicEpochReport& r, bool verify) {
    nlohmann::json e;
    e["epoch"] = r.base.epoch;
    e["steps"] = r.steps;
    e["batches_per_rank"] = r.base.batches;
    e["real_batches"] = r.batches;
    e["padding_steps"] = r.padding_steps;
    e["oversize_batches"] = r.oversize;
    e["min_batch_samples"] = r.min_samples;
    e["mean_batch_samples"] = r.mean_samples;
    e["max_batch_samples"] = r.max_samples;
    e["padding_waste"] = r.padding_waste;
    e["unbucketed_padding_waste"] = r.unbucketed_padding_waste;
    if (verify) {
        e["valid_samples_per_rank"] = r.base.valid;
        e["duplicates"] = r.base.duplicates;
        e["missing"] = r.base.missing;
        e["out_of_range"] = r.base.out_of_range;
        e["exactly_once"] = r.base.ok;
        e["prior_run_samples"] = r.base.prior_ids;
    }
    e["resumed"] = r.base.resumed;
    e["interrupted"] = r.base.interrupted;
    return e;
}

}  // namespace

void add_plan_totals(DynamicEpochReport& r, const EpochPlan& p) {
    r.steps = p.first_step + p.steps;
    r.batches = p.budget.batches;
    r.padding_steps = p.budget.padding_steps;
    r.oversize = p.budget.oversize_batches;
    r.min_samples = p.budget.min_batch_samples;
    r.max_samples = p.budget.max_batch_samples;
    r.padding_waste = p.budget.waste.ratio();
    r.unbucketed_padding_waste = p.budget.unbucketed_waste.ratio();
}

std::vector<DynamicRankTotals> gather_dynamic_totals(const Communicator& comm,
                                                     const DynamicRankTotals& mine) {
    const std::vector<std::uint64_t> all = comm.allgather(
        std::vector<std::uint64_t>{mine.samples, mine.batches, mine.padding_steps, mine.bytes,
                                   mine.oversize, mine.min_samples, mine.max_samples});
    const std::vector<std::uint64_t> micros =
        comm.allgather(static_cast<std::uint64_t>(mine.seconds * 1e6));
    std::vector<DynamicRankTotals> out(static_cast<std::size_t>(comm.size()));
    for (std::size_t r = 0; r < out.size(); ++r) {
        const std::uint64_t* v = all.data() + r * kRankWords;
        out[r] = DynamicRankTotals{v[0], v[1], v[2], v[3],
                                   v[4], v[5], v[6], static_cast<double>(micros[r]) / 1e6};
    }
    return out;
}

void print_dynamic_report(const DynamicOutcome& o, bool verify) {
    std::printf("%-5s %10s %8s %8s %14s %8s %6s %8s %6s\n", "rank", "samples", "batches", "padding",
                "bytes", "oversize", "min", "mean", "max");
    for (std::size_t r = 0; r < o.ranks.size(); ++r) {
        const DynamicRankTotals& t = o.ranks[r];
        const std::uint64_t real = t.batches - t.padding_steps;
        std::printf("%-5zu %10llu %8llu %8llu %14llu %8llu %6llu %8.1f %6llu\n", r,
                    static_cast<ull>(t.samples), static_cast<ull>(t.batches),
                    static_cast<ull>(t.padding_steps), static_cast<ull>(t.bytes),
                    static_cast<ull>(t.oversize), static_cast<ull>(t.min_samples),
                    mean_of(t.samples, real), static_cast<ull>(t.max_samples));
    }
    bool failed = false;
    for (const DynamicEpochReport& r : o.epochs) {
        std::printf(
            "epoch %llu: %llu steps on every rank (%llu batches, %llu padding steps), samples "
            "per batch min %llu mean %.1f max %llu, %llu oversize, padding waste %.1f%% of "
            "padded %s",
            static_cast<ull>(r.base.epoch), static_cast<ull>(r.steps), static_cast<ull>(r.batches),
            static_cast<ull>(r.padding_steps), static_cast<ull>(r.min_samples), r.mean_samples,
            static_cast<ull>(r.max_samples), static_cast<ull>(r.oversize), 100.0 * r.padding_waste,
            o.unit.c_str());
        if (o.batching.bucket_window > 1) {
            std::printf(" (%.1f%% without bucketing)", 100.0 * r.unbucketed_padding_waste);
        }
        std::printf("\n");
        if (verify && !r.base.ok) {
            failed = true;
            std::printf("  epoch %llu: duplicates %llu, missing %llu, out of range %llu\n",
                        static_cast<ull>(r.base.epoch), static_cast<ull>(r.base.duplicates),
                        static_cast<ull>(r.base.missing), static_cast<ull>(r.base.out_of_range));
        }
    }
    if (!verify) return;
    std::printf(failed ? "exactly-once: FAILED (see the epochs above)\n" : "exactly-once: OK\n");
}

void write_dynamic_json(const std::string& path, const DynamicOutcome& o, bool verify,
                        const std::string& shuffle, const std::string& sharding) {
    nlohmann::json j;
    j["schema_version"] = 1;
    j["status"] = o.all_ok ? "ok" : "verify_failed";
    j["world_size"] = o.world_size;
    j["num_samples"] = o.num_samples;
    j["shuffle"] = shuffle;
    j["sharding"] = sharding;
    j["dynamic_batching"] = {{"batch_bytes", o.batching.batch_bytes},
                             {"batch_tokens", o.batching.batch_tokens},
                             {"max_batch_samples", o.batching.max_batch_samples},
                             {"bucket_window", o.batching.bucket_window},
                             {"waste_unit", o.unit}};
    j["epochs"] = nlohmann::json::array();
    for (const auto& r : o.epochs) j["epochs"].push_back(epoch_json(r, verify));
    j["ranks"] = nlohmann::json::array();
    for (std::size_t r = 0; r < o.ranks.size(); ++r) {
        const DynamicRankTotals& t = o.ranks[r];
        const double mb = t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e6 : 0.0;
        j["ranks"].push_back(
            {{"rank", r},
             {"samples", t.samples},
             {"batches", t.batches},
             {"padding_steps", t.padding_steps},
             {"bytes", t.bytes},
             {"oversize_batches", t.oversize},
             {"min_batch_samples", t.min_samples},
             {"mean_batch_samples", mean_of(t.samples, t.batches - t.padding_steps)},
             {"max_batch_samples", t.max_samples},
             {"seconds", t.seconds},
             {"mb_per_s", mb}});
    }
    write_file_atomically(path,
                          j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                          "--json file");
}

}  // namespace mpistage::cli
