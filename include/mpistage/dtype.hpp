#pragma once
/// @file
/// Element types of fields. Values in batches are always in native byte order.

#include <cstddef>
#include <cstdint>
#include <string>

namespace mpistage {

/// Fixed-size element type of a field.
enum class DType : std::uint8_t {
    uint8, int8, uint16, int16, uint32, int32, uint64, int64, float32, float64, boolean
};

/// Size of one element in bytes.
std::size_t dtype_size(DType t) noexcept;
/// Lower-case name ("uint8", "float32", ...), as the CLI and JSON write it.
std::string dtype_name(DType t);
/// Parses a name written by `dtype_name`. @throws ConfigError for unknown names.
DType parse_dtype(const std::string& name);

}  // namespace mpistage
