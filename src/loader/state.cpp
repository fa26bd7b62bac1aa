// LoaderState to and from JSON (nlohmann-json), with the checks the state alone decides.
#include "mpistage/state.hpp"

#include <limits>
#include <nlohmann/json.hpp>

#include "loader/state_check.hpp"
#include "mpistage/error.hpp"
#include "plan/consumed_digest.hpp"

namespace mpistage {

std::string to_string(FingerprintLevel level) {
    switch (level) {
        case FingerprintLevel::ends: return "ends";
        case FingerprintLevel::sampled: return "sampled";
        case FingerprintLevel::full: return "full";
    }
    return "sampled";
}

FingerprintLevel parse_fingerprint_level(const std::string& s, bool allow_ends) {
    if (s == "sampled") return FingerprintLevel::sampled;
    if (s == "full") return FingerprintLevel::full;
    if (allow_ends && s == "ends") return FingerprintLevel::ends;
    throw ConfigError("unknown fingerprint level '" + s + "' (expected sampled or full)");
}

std::string LoaderState::to_json() const {
    // A state without a consumed-id digest (read from versions 1 to 3, or built by hand) is
    // written as version 3, the layout without it, so it reads back the same.
    nlohmann::ordered_json j = {
        {"format_version", consumed_digest.empty() ? 3 : format_version},
        {"dataset_fingerprint", dataset_fingerprint},
        {"fingerprint_level", to_string(fingerprint_level)},
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
        {"run_start_steps", run_start_steps},
        {"run_start_samples", run_start_samples},
    };
    if (!consumed_digest.empty()) j["consumed_digest"] = consumed_digest;
    return j.dump();
}

namespace {

const nlohmann::json& key_of(const nlohmann::json& j, const char* key, const std::string& origin) {
    if (!j.contains(key)) throw ConfigError("state " + origin + ": missing key '" + key + "'");
    return j.at(key);
}

[[noreturn]] void bad_value(const char* key, const nlohmann::json& v, const std::string& origin,
                            const std::string& wanted) {
    throw ConfigError("state " + origin + ": key '" + key + "' is " + v.dump() + "; expected " +
                      wanted);
}

/// A non-negative integer that fits 64 bits (nlohmann parses those as number_unsigned; a
/// negative number, a fraction or a value ≥ 2^64 is another type and refused, not wrapped).
std::uint64_t get_unsigned(const nlohmann::json& j, const char* key, const std::string& origin,
                           std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
    const nlohmann::json& v = key_of(j, key, origin);
    const std::string range = "an integer in [0, " + std::to_string(max) + "]";
    if (!v.is_number_unsigned()) bad_value(key, v, origin, range);
    const auto value = v.get<std::uint64_t>();
    if (value > max) bad_value(key, v, origin, range);
    return value;
}

int get_int(const nlohmann::json& j, const char* key, const std::string& origin, int lo, int hi) {
    const nlohmann::json& v = key_of(j, key, origin);
    const std::string range = "an integer in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "]";
    if (!v.is_number_integer()) bad_value(key, v, origin, range);
    const auto value = v.get<std::int64_t>();
    if (!v.is_number_unsigned() && value < lo) bad_value(key, v, origin, range);
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
        bad_value(key, v, origin, range);
    }
    if (value < lo || value > hi) bad_value(key, v, origin, range);
    return static_cast<int>(value);
}

std::string get_string(const nlohmann::json& j, const char* key, const std::string& origin) {
    const nlohmann::json& v = key_of(j, key, origin);
    if (!v.is_string()) bad_value(key, v, origin, "a string");
    return v.get<std::string>();
}

bool get_bool(const nlohmann::json& j, const char* key, const std::string& origin) {
    const nlohmann::json& v = key_of(j, key, origin);
    if (!v.is_boolean()) bad_value(key, v, origin, "true or false");
    return v.get<bool>();
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
    const nlohmann::json& version = key_of(j, "format_version", origin);
    if (!version.is_number_integer() || version.get<std::int64_t>() < 1 ||
        version.get<std::int64_t>() > kFormatVersion) {
        throw ConfigError("state " + origin + " has format version " + version.dump() +
                          "; this build reads versions 1 to " + std::to_string(kFormatVersion));
    }
    const int read_version = version.get<int>();
    s.dataset_fingerprint = get_string(j, "dataset_fingerprint", origin);
    s.num_samples = get_unsigned(j, "num_samples", origin);
    if (s.num_samples == 0) bad_value("num_samples", j["num_samples"], origin, "at least 1");
    s.skipped_records = get_unsigned(j, "skipped_records", origin);
    s.plan.batch_size = get_unsigned(j, "batch_size", origin);
    s.plan.seed = get_unsigned(j, "seed", origin);
    try {
        s.plan.sharding = parse_sharding(get_string(j, "sharding", origin));
        s.plan.shuffle = parse_shuffle(get_string(j, "shuffle", origin));
        s.plan.remainder = parse_remainder(get_string(j, "remainder", origin));
        // Versions 1 and 2 fingerprinted samples 0, N/2 and N−1.
        s.fingerprint_level =
            read_version >= 3
                ? parse_fingerprint_level(get_string(j, "fingerprint_level", origin), true)
                : FingerprintLevel::ends;
    } catch (const ConfigError& e) {
        throw ConfigError("state " + origin + ": " + e.what());
    }
    s.plan.balance_steps = get_bool(j, "balance_steps", origin);
    if (read_version >= 2) {  // version 1 had fixed batches only
        s.plan.budget.batch_bytes = get_unsigned(j, "batch_bytes", origin);
        s.plan.budget.batch_tokens = get_unsigned(j, "batch_tokens", origin);
        s.plan.budget.max_batch_samples = get_unsigned(j, "max_batch_samples", origin);
        s.plan.budget.bucket_window = get_unsigned(j, "bucket_window", origin);
        s.plan.budget.token_field = get_unsigned(j, "token_field", origin, 1u << 20);
    }
    s.world_size = get_int(j, "world_size", origin, 1, kMaxStateWorldSize);
    s.epoch = get_unsigned(j, "epoch", origin);
    s.steps_consumed = get_unsigned(j, "steps_consumed", origin);
    s.samples_consumed = get_unsigned(j, "samples_consumed", origin);
    if (read_version >= 3) {
        s.run_start_steps = get_unsigned(j, "run_start_steps", origin);
        s.run_start_samples = get_unsigned(j, "run_start_samples", origin);
    } else {  // unknown: the state is its own run start (nothing to relate it to)
        s.run_start_steps = s.steps_consumed;
        s.run_start_samples = s.samples_consumed;
    }
    if (read_version >= 4) {  // versions 1 to 3 had no digest: left empty (not checked)
        s.consumed_digest = get_string(j, "consumed_digest", origin);
        std::uint64_t digest = 0;
        if (!detail::digest_from_hex(s.consumed_digest, digest)) {
            bad_value("consumed_digest", j["consumed_digest"], origin, "16 lowercase hex digits");
        }
    }
    s.format_version = kFormatVersion;
    detail::check_state_numbers(s, origin);
    return s;
}

bool LoaderState::operator==(const LoaderState& o) const {
    return to_json() == o.to_json();
}

}  // namespace mpistage
