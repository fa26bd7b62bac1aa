#pragma once
/// @file
/// Element types of fields. Values in batches are always in native byte order.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

/// Bytes of one sample of shape `shape` with elements of `t` (product of the dimensions times the
/// element size), checked: @throws ConfigError naming `what` when a dimension is negative or the
/// product exceeds 2^62 bytes (it would overflow 64-bit offsets further on).
std::uint64_t checked_sample_bytes(const std::vector<std::int64_t>& shape, DType t,
                                   const std::string& what);

/// a·b, or throws ConfigError naming `what` when the product exceeds 2^62.
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& what);

}  // namespace mpistage
