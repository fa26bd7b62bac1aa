#pragma once
// Checked reads of the keys of a JSON document written by mpistage (the loader's and the
// streams' state files): a missing key, a value of another type, a negative number, a fraction
// or a number out of range is a ConfigError naming the key, the value and what was expected,
// never a wrapped or converted value. nlohmann-json parses a non-negative integer below 2^64 as
// number_unsigned; everything else that looks like one (-1, 1.5, 2^64) is another type.

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

namespace mpistage::detail {

/// `j[key]`; throws ConfigError "<context>: missing key '<key>'" when absent.
const nlohmann::json& json_key(const nlohmann::json& j, const char* key,
                               const std::string& context);

/// Throws ConfigError "<context>: key '<key>' is <value>; expected <wanted>".
[[noreturn]] void json_bad_value(const char* key, const nlohmann::json& v,
                                 const std::string& context, const std::string& wanted);

/// `v` as an integer in [0, max]; `key` only names it in the error (an array element's
/// position, say).
std::uint64_t json_unsigned_value(const nlohmann::json& v, const char* key,
                                  const std::string& context,
                                  std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

/// `j[key]` as an integer in [0, max].
std::uint64_t json_unsigned(const nlohmann::json& j, const char* key, const std::string& context,
                            std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

/// `j[key]` as an integer in [lo, hi].
int json_int(const nlohmann::json& j, const char* key, const std::string& context, int lo, int hi);

/// `j[key]` as a string.
std::string json_string(const nlohmann::json& j, const char* key, const std::string& context);

/// `j[key]` as true or false.
bool json_bool(const nlohmann::json& j, const char* key, const std::string& context);

/// `j[key]` as an array.
const nlohmann::json& json_array(const nlohmann::json& j, const char* key,
                                 const std::string& context);

}  // namespace mpistage::detail
