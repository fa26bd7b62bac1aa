#include "mpistage/dtype.hpp"

#include "mpistage/error.hpp"

namespace mpistage {

std::size_t dtype_size(DType t) noexcept {
    switch (t) {
    case DType::uint8:
    case DType::int8:
    case DType::boolean: return 1;
    case DType::uint16:
    case DType::int16: return 2;
    case DType::uint32:
    case DType::int32:
    case DType::float32: return 4;
    case DType::uint64:
    case DType::int64:
    case DType::float64: return 8;
    }
    return 1;
}

std::string dtype_name(DType t) {
    switch (t) {
    case DType::uint8: return "uint8";
    case DType::int8: return "int8";
    case DType::uint16: return "uint16";
    case DType::int16: return "int16";
    case DType::uint32: return "uint32";
    case DType::int32: return "int32";
    case DType::uint64: return "uint64";
    case DType::int64: return "int64";
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::boolean: return "bool";
    }
    return "?";
}

DType parse_dtype(const std::string& name) {
    for (DType t : {DType::uint8, DType::int8, DType::uint16, DType::int16, DType::uint32,
                    DType::int32, DType::uint64, DType::int64, DType::float32, DType::float64,
                    DType::boolean}) {
        if (dtype_name(t) == name) return t;
    }
    if (name == "float") return DType::float32;
    if (name == "double") return DType::float64;
    throw ConfigError("unknown dtype '" + name + "' (expected uint8..int64, float32, float64, bool)");
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& what) {
    constexpr std::uint64_t kLimit = std::uint64_t{1} << 62;
    if (a != 0 && b > kLimit / a) {
        throw ConfigError(what + ": size " + std::to_string(a) + " x " + std::to_string(b) +
                          " exceeds 2^62 bytes");
    }
    return a * b;
}

std::uint64_t checked_sample_bytes(const std::vector<std::int64_t>& shape, DType t,
                                   const std::string& what) {
    std::uint64_t bytes = dtype_size(t);
    for (const auto d : shape) {
        if (d < 0) throw ConfigError(what + ": negative dimension " + std::to_string(d));
        bytes = checked_mul(bytes, static_cast<std::uint64_t>(d), what + ": sample shape");
    }
    return bytes;
}

}  // namespace mpistage
