// Checked reads of JSON keys (json_fields.hpp).
#include "util/json_fields.hpp"

#include "mpistage/error.hpp"

namespace mpistage::detail {

const nlohmann::json& json_key(const nlohmann::json& j, const char* key,
                               const std::string& context) {
    if (!j.is_object() || !j.contains(key)) {
        throw ConfigError(context + ": missing key '" + key + "'");
    }
    return j.at(key);
}

void json_bad_value(const char* key, const nlohmann::json& v, const std::string& context,
                    const std::string& wanted) {
    throw ConfigError(context + ": key '" + key + "' is " + v.dump() + "; expected " + wanted);
}

std::uint64_t json_unsigned_value(const nlohmann::json& v, const char* key,
                                  const std::string& context, std::uint64_t max) {
    const std::string range = "an integer in [0, " + std::to_string(max) + "]";
    if (!v.is_number_unsigned()) json_bad_value(key, v, context, range);
    const auto value = v.get<std::uint64_t>();
    if (value > max) json_bad_value(key, v, context, range);
    return value;
}

std::uint64_t json_unsigned(const nlohmann::json& j, const char* key, const std::string& context,
                            std::uint64_t max) {
    return json_unsigned_value(json_key(j, key, context), key, context, max);
}

int json_int(const nlohmann::json& j, const char* key, const std::string& context, int lo, int hi) {
    const nlohmann::json& v = json_key(j, key, context);
    const std::string range =
        "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (!v.is_number_integer()) json_bad_value(key, v, context, range);
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(hi) || (lo > 0 && u < static_cast<std::uint64_t>(lo))) {
            json_bad_value(key, v, context, range);
        }
        return static_cast<int>(u);
    }
    const auto value = v.get<std::int64_t>();
    if (value < lo || value > hi) json_bad_value(key, v, context, range);
    return static_cast<int>(value);
}

std::string json_string(const nlohmann::json& j, const char* key, const std::string& context) {
    const nlohmann::json& v = json_key(j, key, context);
    if (!v.is_string()) json_bad_value(key, v, context, "a string");
    return v.get<std::string>();
}

bool json_bool(const nlohmann::json& j, const char* key, const std::string& context) {
    const nlohmann::json& v = json_key(j, key, context);
    if (!v.is_boolean()) json_bad_value(key, v, context, "true or false");
    return v.get<bool>();
}

const nlohmann::json& json_array(const nlohmann::json& j, const char* key,
                                 const std::string& context) {
    const nlohmann::json& v = json_key(j, key, context);
    if (!v.is_array()) json_bad_value(key, v, context, "an array");
    return v;
}

}  // namespace mpistage::detail
