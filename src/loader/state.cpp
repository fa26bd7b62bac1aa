// LoaderState to and from JSON (nlohmann-json).
#include "mpistage/state.hpp"

#include <nlohmann/json.hpp>

#include "mpistage/error.hpp"

namespace mpistage {

std::string LoaderState::to_json() const {
    const nlohmann::ordered_json j = {
        {"format_version", format_version},
        {"dataset_fingerprint", dataset_fingerprint},
        {"num_samples", num_samples},
        {"skipped_records", skipped_records},
        {"batch_size", plan.batch_size},
        {"seed", plan.seed},
        {"sharding", to_string(plan.sharding)},
        {"shuffle", to_string(plan.shuffle)},
        {"remainder", to_string(plan.remainder)},
        {"balance_steps", plan.balance_steps},
        {"batch_bytes", plan.budget.batch_bytes},
        {"batch_tokens", plan.budget.batch_tokens},
        {"max_batch_samples", plan.budget.max_batch_samples},
        {"bucket_window", plan.budget.bucket_window},
        {"token_field", plan.budget.token_field},
        {"world_size", world_size},
        {"epoch", epoch},
        {"steps_consumed", steps_consumed},
        {"samples_consumed", samples_consumed},
    };
    return j.dump();
}

namespace {

template <class T>
T get_key(const nlohmann::json& j, const char* key, const std::string& origin) {
    if (!j.contains(key)) {
        throw ConfigError("state " + origin + ": missing key '" + key + "'");
    }
    try {
        return j.at(key).get<T>();
    } catch (const nlohmann::json::exception& e) {
        throw ConfigError("state " + origin + ": key '" + key + "' has the wrong type (" +
                          e.what() + ")");
    }
}

}  // namespace

LoaderState LoaderState::from_json(const std::string& text, const std::string& origin) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw ConfigError("state " + origin + " is not valid JSON: " + e.what());
    }
    if (!j.is_object()) throw ConfigError("state " + origin + " is not a JSON object");
    LoaderState s;
    s.format_version = get_key<int>(j, "format_version", origin);
    if (s.format_version != kFormatVersion && s.format_version != 1) {
        throw ConfigError("state " + origin + " has format version " +
                          std::to_string(s.format_version) + "; this build reads versions 1 and " +
                          std::to_string(kFormatVersion));
    }
    s.dataset_fingerprint = get_key<std::string>(j, "dataset_fingerprint", origin);
    s.num_samples = get_key<std::uint64_t>(j, "num_samples", origin);
    s.skipped_records = get_key<std::uint64_t>(j, "skipped_records", origin);
    s.plan.batch_size = get_key<std::uint64_t>(j, "batch_size", origin);
    s.plan.seed = get_key<std::uint64_t>(j, "seed", origin);
    try {
        s.plan.sharding = parse_sharding(get_key<std::string>(j, "sharding", origin));
        s.plan.shuffle = parse_shuffle(get_key<std::string>(j, "shuffle", origin));
        s.plan.remainder = parse_remainder(get_key<std::string>(j, "remainder", origin));
    } catch (const ConfigError& e) {
        throw ConfigError("state " + origin + ": " + e.what());
    }
    s.plan.balance_steps = get_key<bool>(j, "balance_steps", origin);
    if (s.format_version >= 2) {  // version 1 had fixed batches only
        s.plan.budget.batch_bytes = get_key<std::uint64_t>(j, "batch_bytes", origin);
        s.plan.budget.batch_tokens = get_key<std::uint64_t>(j, "batch_tokens", origin);
        s.plan.budget.max_batch_samples = get_key<std::uint64_t>(j, "max_batch_samples", origin);
        s.plan.budget.bucket_window = get_key<std::uint64_t>(j, "bucket_window", origin);
        s.plan.budget.token_field = get_key<std::size_t>(j, "token_field", origin);
    }
    s.format_version = kFormatVersion;
    s.world_size = get_key<int>(j, "world_size", origin);
    s.epoch = get_key<std::uint64_t>(j, "epoch", origin);
    s.steps_consumed = get_key<std::uint64_t>(j, "steps_consumed", origin);
    s.samples_consumed = get_key<std::uint64_t>(j, "samples_consumed", origin);
    if (s.world_size < 1 || s.num_samples == 0 || s.samples_consumed > s.num_samples) {
        throw ConfigError("state " + origin + " is inconsistent: world_size " +
                          std::to_string(s.world_size) + ", num_samples " +
                          std::to_string(s.num_samples) + ", samples_consumed " +
                          std::to_string(s.samples_consumed));
    }
    return s;
}

bool LoaderState::operator==(const LoaderState& o) const {
    return to_json() == o.to_json();
}

}  // namespace mpistage
