// The JSON report of `mpistage stage --json`, written atomically by rank 0: a reader never sees
// a partial or empty file, and a failed run leaves a report that says so.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli/atomic_file.hpp"
#include "cli/report.hpp"

namespace mpistage::cli {

namespace {

// Version of the report's layout (README "The JSON report"): raised when a key changes meaning
// or disappears; new keys do not raise it.
constexpr int kJsonSchemaVersion = 1;

nlohmann::json epoch_json(const EpochReport& r, bool verify) {
    nlohmann::json e;
    e["epoch"] = r.epoch;
    e["batches_per_rank"] = r.batches;
    e["tier"] = r.tier;
    e["seconds"] = r.seconds;
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
    if (r.step_ratio_worst > 0) {
        e["step_byte_ratio"] = {{"worst", r.step_ratio_worst},
                                {"mean", r.step_ratio_mean},
                                {"unbalanced_worst", r.unbalanced_worst},
                                {"unbalanced_mean", r.unbalanced_mean}};
    }
    return e;
}

nlohmann::json rank_json(std::size_t rank, const RankTotals& t) {
    return {{"rank", rank},
            {"samples", t.samples},
            {"batches", t.batches},
            {"bytes", t.bytes},
            {"seconds", t.seconds},
            {"mb_per_s", t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e6 : 0.0},
            {"wait_seconds", t.wait_seconds},
            {"wait_io_seconds", t.wait_io_seconds},
            {"wait_peers_seconds", t.wait_peers_seconds},
            {"records_moved", t.records_moved},
            {"device", t.device < 0 ? std::string("cpu") : "cuda:" + std::to_string(t.device)},
            {"h2d_bytes", t.h2d_bytes},
            {"h2d_seconds", t.h2d_seconds}};
}

}  // namespace

void check_json_destination(const std::string& path) {
    check_destination(path, "--json file");
}

void write_stage_json(const StageArgs& a, const StageOutcome& o) {
    nlohmann::json j;
    j["schema_version"] = kJsonSchemaVersion;
    j["status"] = o.all_ok ? "ok" : "verify_failed";
    j["world_size"] = o.world_size;
    j["num_samples"] = o.num_samples;
    j["batch_size"] = a.batch_size;
    j["remainder"] = a.remainder;
    j["shuffle"] = a.shuffle;
    j["sharding"] = a.sharding;
    for (const auto& stat : o.source) j[stat.name] = stat.value;
    j["stage"] = tier_json(o.tier);
    j["epochs"] = nlohmann::json::array();
    for (const auto& r : o.epochs) j["epochs"].push_back(epoch_json(r, a.verify));
    if (o.resume) j["resumed_from"] = nlohmann::json::parse(o.resume->to_json());
    j["state"] = nlohmann::json::parse(o.saved.to_json());
    j["stopped_after_steps"] = o.stopped_after;
    j["ranks"] = nlohmann::json::array();
    for (std::size_t r = 0; r < o.ranks.size(); ++r) j["ranks"].push_back(rank_json(r, o.ranks[r]));
    write_file_atomically(
        a.json, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
        "--json file");
}

void write_error_json(const std::string& path, int world_size, const Error& error) {
    nlohmann::json j;
    j["schema_version"] = kJsonSchemaVersion;
    j["status"] = "error";
    j["world_size"] = world_size;
    j["error"] = {{"kind", error_kind_name(error.kind())}, {"message", error.what()}};
    write_file_atomically(
        path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
        "--json file");
}

}  // namespace mpistage::cli
