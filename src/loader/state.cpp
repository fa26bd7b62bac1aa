// LoaderState to and from JSON (nlohmann-json), with the checks the state alone decides.
#include "mpistage/state.hpp"

#include <limits>
#include <nlohmann/json.hpp>

#include "loader/state_check.hpp"
#include "mpistage/error.hpp"
#include "plan/consumed_digest.hpp"
#include "util/json_fields.hpp"

namespace mpistage {

std::string to_string(FingerprintLevel level) {
    switch (level) {
        case FingerprintLevel::ends:
            return "ends";
        case FingerprintLevel::sampled_v4:
            return "sampled_v4";
        case FingerprintLevel::sampled:
            return "sampled";
        case FingerprintLevel::full:
            return "full";
    }
    return "sampled";
}

FingerprintLevel parse_fingerprint_level(const std::string& s, bool allow_legacy) {
    if (s == "sampled") return FingerprintLevel::sampled;
    if (s == "full") return FingerprintLevel::full;
    if (allow_legacy && s == "ends") return FingerprintLevel::ends;
    if (allow_legacy && s == "sampled_v4") return FingerprintLevel::sampled_v4;
    throw ConfigError("unknown fingerprint level '" + s + "' (expected sampled or full" +
                      (allow_legacy ? std::string(", or ends or sampled_v4 in a saved state)")
                                    : std::string(")")));
}

namespace {

/// The keys of a stream state (`LoaderInput::stream`).
std::string stream_state_json(const LoaderState& s) {
    nlohmann::ordered_json j = {
        {"format_version", LoaderState::kFormatVersion},
        {"input", "stream"},
        {"dataset_fingerprint", s.dataset_fingerprint},
        {"world_size", s.world_size},
        {"epoch", s.epoch},
        {"steps_consumed", s.steps_consumed},
        {"samples_consumed", s.samples_consumed},
        {"streams", nlohmann::ordered_json::array()},
    };
    for (const StreamPosition& p : s.streams) {
        nlohmann::ordered_json pending = nlohmann::ordered_json::array();
        for (const auto& r : p.pending) pending.push_back({r.first, r.second});
        j["streams"].push_back({{"next", p.next}, {"pending", pending}});
    }
    return j.dump();
}

/// Parses the keys of a stream state (`"input": "stream"`). Negative, fractional or
/// out-of-range positions are refused, never wrapped (a wrapped `next` would make a check walk
/// up to 2^64 positions).
LoaderState stream_state_from_json(const nlohmann::json& j, const std::string& where) {
    LoaderState s;
    s.input = LoaderInput::stream;
    s.dataset_fingerprint = detail::json_string(j, "dataset_fingerprint", where);
    s.world_size = detail::json_int(j, "world_size", where, 1, kMaxStateWorldSize);
    s.epoch = detail::json_unsigned(j, "epoch", where);
    s.steps_consumed = detail::json_unsigned(j, "steps_consumed", where);
    s.samples_consumed = detail::json_unsigned(j, "samples_consumed", where);
    for (const auto& js : detail::json_array(j, "streams", where)) {
        StreamPosition p;
        p.next = detail::json_unsigned(js, "next", where);
        std::uint64_t at = 0;
        for (const auto& r : detail::json_array(js, "pending", where)) {
            if (!r.is_array() || r.size() != 2) {
                detail::json_bad_value("pending", r, where, "[first, end] pairs");
            }
            const std::uint64_t b = detail::json_unsigned_value(r[0], "pending", where);
            const std::uint64_t e = detail::json_unsigned_value(r[1], "pending", where);
            if (b < at || e <= b || e > p.next) {
                detail::json_bad_value("pending", r, where,
                                       "ascending, disjoint [first, end) ranges below next");
            }
            at = e;
            p.pending.emplace_back(b, e);
        }
        s.streams.push_back(std::move(p));
    }
    if ((s.steps_consumed == 0) != (s.samples_consumed == 0) && s.steps_consumed == 0) {
        detail::json_bad_value("samples_consumed", j["samples_consumed"], where,
                               "0 when steps_consumed is 0");
    }
    return s;
}

}  // namespace

std::string LoaderState::to_json() const {
    if (input == LoaderInput::stream) return stream_state_json(*this);
    // A state without a consumed-id digest (read from versions 1 to 3, or built by hand) is
    // written as version 3, the layout without it, so it reads back the same (its level word
    // included: a version-3 "sampled" is read as `sampled_v4`, which is what such a state,
    // saved by version 3, holds; a legacy level is written by its own word).
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
    if (plan.shuffle == Shuffle::chunks) {
        j["chunk_samples"] = plan.chunk_samples;
        j["window_chunks"] = plan.window_chunks;
        j["order_world_size"] = order_world_size;
    }
    if (!consumed_digest.empty()) j["consumed_digest"] = consumed_digest;
    return j.dump();
}

LoaderState LoaderState::from_json(const std::string& text, const std::string& origin) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw ConfigError("state " + origin + " is not valid JSON: " + e.what());
    }
    if (!j.is_object()) throw ConfigError("state " + origin + " is not a JSON object");
    LoaderState s;
    const std::string where = "state " + origin;
    const nlohmann::json& version = detail::json_key(j, "format_version", where);
    if (!version.is_number_integer() || version.get<std::int64_t>() < 1 ||
        version.get<std::int64_t>() > kFormatVersion) {
        throw ConfigError("state " + origin + " has format version " + version.dump() +
                          "; this build reads versions 1 to " + std::to_string(kFormatVersion));
    }
    const int read_version = version.get<int>();
    if (j.contains("input")) {
        const std::string input = detail::json_string(j, "input", where);
        if (input == "stream") return stream_state_from_json(j, where);
        if (input != "files") {
            detail::json_bad_value("input", j["input"], where, "\"files\" or \"stream\"");
        }
    }
    s.dataset_fingerprint = detail::json_string(j, "dataset_fingerprint", where);
    s.num_samples = detail::json_unsigned(j, "num_samples", where);
    if (s.num_samples == 0)
        detail::json_bad_value("num_samples", j["num_samples"], where, "at least 1");
    s.skipped_records = detail::json_unsigned(j, "skipped_records", where);
    s.plan.batch_size = detail::json_unsigned(j, "batch_size", where);
    s.plan.seed = detail::json_unsigned(j, "seed", where);
    try {
        s.plan.sharding = parse_sharding(detail::json_string(j, "sharding", where));
        s.plan.shuffle = parse_shuffle(detail::json_string(j, "shuffle", where));
        s.plan.remainder = parse_remainder(detail::json_string(j, "remainder", where));
        // Versions 1 and 2 fingerprinted samples 0, N/2 and N−1; the `sampled` of versions 3
        // and 4 also covered every sample's size (`sampled_v4`, still computed to check it).
        s.fingerprint_level =
            read_version >= 3
                ? parse_fingerprint_level(detail::json_string(j, "fingerprint_level", where), true)
                : FingerprintLevel::ends;
        if (read_version <= 4 && s.fingerprint_level == FingerprintLevel::sampled) {
            s.fingerprint_level = FingerprintLevel::sampled_v4;
        }
    } catch (const ConfigError& e) {
        throw ConfigError("state " + origin + ": " + e.what());
    }
    s.plan.balance_steps = detail::json_bool(j, "balance_steps", where);
    if (read_version >= 2) {  // version 1 had fixed batches only
        s.plan.budget.batch_bytes = detail::json_unsigned(j, "batch_bytes", where);
        s.plan.budget.batch_tokens = detail::json_unsigned(j, "batch_tokens", where);
        s.plan.budget.max_batch_samples = detail::json_unsigned(j, "max_batch_samples", where);
        s.plan.budget.bucket_window = detail::json_unsigned(j, "bucket_window", where);
        s.plan.budget.token_field = detail::json_unsigned(j, "token_field", where, 1u << 20);
    }
    s.world_size = detail::json_int(j, "world_size", where, 1, kMaxStateWorldSize);
    if (s.plan.shuffle == Shuffle::chunks) {  // bounded before they size anything
        s.plan.chunk_samples =
            detail::json_unsigned(j, "chunk_samples", where, std::uint64_t{1} << 40);
        s.plan.window_chunks =
            detail::json_unsigned(j, "window_chunks", where, std::uint64_t{1} << 32);
        if (s.plan.chunk_samples == 0 || s.plan.window_chunks == 0) {
            detail::json_bad_value(s.plan.chunk_samples == 0 ? "chunk_samples" : "window_chunks",
                                   j[s.plan.chunk_samples == 0 ? "chunk_samples" : "window_chunks"],
                                   where, "at least 1");
        }
        // 0 at an epoch's start (the next epoch's order is made for the resuming world).
        s.order_world_size = detail::json_int(j, "order_world_size", where, 0, kMaxStateWorldSize);
    }
    s.epoch = detail::json_unsigned(j, "epoch", where);
    s.steps_consumed = detail::json_unsigned(j, "steps_consumed", where);
    s.samples_consumed = detail::json_unsigned(j, "samples_consumed", where);
    if (read_version >= 3) {
        s.run_start_steps = detail::json_unsigned(j, "run_start_steps", where);
        s.run_start_samples = detail::json_unsigned(j, "run_start_samples", where);
    } else {  // unknown: the state is its own run start (nothing to relate it to)
        s.run_start_steps = s.steps_consumed;
        s.run_start_samples = s.samples_consumed;
    }
    if (read_version >= 4) {  // versions 1 to 3 had no digest: left empty (not checked)
        s.consumed_digest = detail::json_string(j, "consumed_digest", where);
        std::uint64_t digest = 0;
        if (!detail::digest_from_hex(s.consumed_digest, digest)) {
            detail::json_bad_value("consumed_digest", j["consumed_digest"], where,
                                   "16 lowercase hex digits");
        }
    }
    if (s.plan.shuffle == Shuffle::chunks && s.steps_consumed > 0 && s.order_world_size == 0) {
        detail::json_bad_value("order_world_size", j["order_world_size"], where,
                               "the world size the epoch's order was made for (≥ 1) inside an "
                               "epoch");
    }
    s.format_version = kFormatVersion;
    detail::check_state_numbers(s, origin);
    return s;
}

bool LoaderState::operator==(const LoaderState& o) const {
    return to_json() == o.to_json();
}

}  // namespace mpistage
