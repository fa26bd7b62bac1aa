// The JSON report of `mpistage stage --json`, written atomically by rank 0: a reader never sees
// a partial or empty file, and a failed run leaves a report that says so.
#include <map>
#include <nlohmann/json.hpp>

#include "cli/atomic_file.hpp"
#include "cli/report.hpp"
#include "cli/version.hpp"
#include "mpistage/config.hpp"

namespace mpistage::cli {

namespace {

// Version of the report's layout (README "The JSON report"): raised when a key changes meaning
// or disappears; new keys do not raise it. 2: one schema for files, budget batches and streams.
constexpr int kJsonSchemaVersion = 2;

nlohmann::json epoch_json(const EpochReport& r, bool verify) {
    nlohmann::json e;
    e["epoch"] = r.epoch;
    e["batches_per_rank"] = r.batches;
    e["tier"] = r.tier;
    e["seconds"] = r.seconds;
    e["steps"] = r.steps;
    e["real_batches"] = r.real_batches;
    e["padding_steps"] = r.padding_steps;
    e["padding_slots"] = r.padding_slots;
    e["oversize_batches"] = r.oversize;
    e["min_batch_samples"] = r.min_batch_samples;
    e["mean_batch_samples"] =
        r.real_batches ? static_cast<double>(r.valid_samples) / static_cast<double>(r.real_batches)
                       : 0.0;
    e["max_batch_samples"] = r.max_batch_samples;
    e["valid_samples"] = r.valid_samples;
    if (r.padding_waste >= 0) {
        e["budget"] = {{"padding_waste", r.padding_waste},
                       {"unbucketed_padding_waste", r.unbucketed_padding_waste}};
    }
    if (verify) {
        e["valid_samples_per_rank"] = r.valid;
        e["duplicates"] = r.duplicates;
        e["missing"] = r.missing;
        e["out_of_range"] = r.out_of_range;
        e["exactly_once"] = r.ok;
        e["prior_run_samples"] = r.prior_ids;
    }
    e["resumed"] = r.resumed;
    e["interrupted"] = r.interrupted;
    e["ranks"] = nlohmann::json::array();
    for (std::size_t k = 0; k < r.ranks.size(); ++k) {
        const EpochReport::RankTimes& t = r.ranks[k];
        e["ranks"].push_back({{"rank", k},
                              {"seconds", t.seconds},
                              {"wait_seconds", t.wait_seconds},
                              {"wait_io_seconds", t.wait_io_seconds},
                              {"wait_peers_seconds", t.wait_peers_seconds}});
    }
    e["waited_on_rank"] =
        r.waited_on_rank < 0 ? nlohmann::json() : nlohmann::json(r.waited_on_rank);
    e["others_waited_seconds"] = r.others_waited_seconds;
    e["shuffle_quality"] = nullptr;  // streams: rows in query order, nothing to measure
    if (r.shuffle) e["shuffle_quality"] = shuffle_figure_json(*r.shuffle);
    if (r.step_ratio_worst > 0) {
        e["step_byte_ratio"] = {{"worst", r.step_ratio_worst},
                                {"mean", r.step_ratio_mean},
                                {"unbalanced_worst", r.unbalanced_worst},
                                {"unbalanced_mean", r.unbalanced_mean}};
    }
    return e;
}

nlohmann::json rank_json(std::size_t rank, const RankTotals& t, const std::string& host) {
    return {{"rank", rank},
            {"host", host},
            {"samples", t.samples},
            {"batches", t.batches},
            {"padding_slots", t.padding_slots},
            {"bytes", t.bytes},
            {"seconds", t.seconds},
            {"mb_per_s", t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e6 : 0.0},
            {"wait_seconds", t.wait_seconds},
            {"wait_io_seconds", t.wait_io_seconds},
            {"wait_peers_seconds", t.wait_peers_seconds},
            {"records_moved", t.records_moved},
            {"oversize_batches", t.oversize},
            {"device", t.device < 0 ? std::string("cpu") : "cuda:" + std::to_string(t.device)},
            {"h2d_bytes", t.h2d_bytes},
            {"h2d_seconds", t.h2d_seconds},
            {"cpu_seconds", t.cpu_seconds},
            {"read_ahead",
             {{"chunks", t.read_ahead_chunks},
              {"peak_bytes", t.read_ahead_peak_bytes},
              {"over_budget_chunks", t.read_ahead_over_budget},
              {"readers", t.read_ahead_readers},
              {"wait_seconds", t.read_ahead_wait_seconds}}}};
}

// The hosts in order of their first rank, each with its ranks (the ranks per host).
nlohmann::json hosts_json(const std::vector<std::string>& hosts) {
    nlohmann::json out = nlohmann::json::array();
    std::map<std::string, std::size_t> at;
    for (std::size_t r = 0; r < hosts.size(); ++r) {
        const auto [it, added] = at.emplace(hosts[r], out.size());
        if (added) out.push_back({{"host", hosts[r]}, {"ranks", nlohmann::json::array()}});
        out[it->second]["ranks"].push_back(r);
    }
    return out;
}

}  // namespace

void check_json_destination(const std::string& path) {
    check_destination(path, "--json file");
}

void write_stage_json(const StageArgs& a, const StageOutcome& o) {
    nlohmann::json j;
    j["schema_version"] = kJsonSchemaVersion;
    j["status"] = o.all_ok ? "ok" : "verify_failed";
    j["mpistage_version"] = MPISTAGE_VERSION;
    j["git_commit"] = git_commit();
    j["command_line"] = a.command_line;
    j["world_size"] = o.world_size;
    j["input"] = {{"kind", o.input_kind}, {"batching", o.batching}, {"paths", o.paths}};
    j["num_samples"] = o.num_samples;
    j["batch_size"] = o.batch_size;
    j["remainder"] = o.remainder;
    j["shuffle"] = o.shuffle;
    j["sharding"] = o.sharding;
    j["epochs_requested"] = a.epochs;
    j["first_epoch"] = a.first_epoch;
    j["compute_us_per_step"] = a.compute_ms * 1000 + a.compute_us;
    j["fields"] = nlohmann::json::array();
    for (const auto& f : o.fields) {
        j["fields"].push_back({{"name", f.name},
                               {"dtype", dtype_name(f.dtype)},
                               {"sample_shape", f.sample_shape},
                               {"ragged", f.ragged}});
    }
    j["options"] = o.options;
    j["state_saves"] = o.state_saves;
    for (const auto& stat : o.source) j[stat.name] = stat.value;
    j["source_notes"] = o.source_notes;
    if (!o.budget.is_null()) j["budget"] = o.budget;
    if (!o.stream.is_null()) j["stream"] = o.stream;
    j["stage"] = tier_json(o.tier);
    j["epochs"] = nlohmann::json::array();
    for (const auto& r : o.epochs) j["epochs"].push_back(epoch_json(r, a.verify));
    if (!o.resumed_from.empty()) j["resumed_from"] = nlohmann::json::parse(o.resumed_from);
    j["state"] = nlohmann::json::parse(o.state);
    j["stopped_after_steps"] = o.stopped_after;
    j["stop_signals"] = o.stop_signals;
    j["stopped_by_signal"] =
        o.stopped_by_signal.empty() ? nlohmann::json() : nlohmann::json(o.stopped_by_signal);
    j["ranks"] = nlohmann::json::array();
    for (std::size_t r = 0; r < o.ranks.size(); ++r) {
        j["ranks"].push_back(rank_json(r, o.ranks[r], r < o.hosts.size() ? o.hosts[r] : ""));
    }
    j["hosts"] = hosts_json(o.hosts);
    write_output_file(a.json,
                      j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                      "--json file");
}

void write_error_json(const std::string& path, int world_size, const Error& error) {
    nlohmann::json j;
    j["schema_version"] = kJsonSchemaVersion;
    j["status"] = "error";
    j["world_size"] = world_size;
    j["error"] = {{"kind", error_kind_name(error.kind())}, {"message", error.what()}};
    write_output_file(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                      "--json file");
}

}  // namespace mpistage::cli
