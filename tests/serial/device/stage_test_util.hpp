#pragma once
// Shared by the device tests: a byte pattern every step fills and every check recomputes on
// its own.

#include <cstddef>
#include <cstdint>

namespace stage_test {

/// Byte `i` of step `step` for run `seed` (splitmix64 of the 8-byte word, little end first).
inline std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t step, std::size_t i) {
    std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (step * 0x100000001B3ull + i / 8 + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<std::uint8_t>(z >> (8 * (i % 8)));
}

/// Bytes step `step` fills: varies with the step, at most `capacity`.
inline std::size_t step_bytes(std::uint64_t step, std::size_t capacity) {
    return capacity - (step * 37) % (capacity / 2);
}

/// Writes the pattern of `step` and returns its size.
inline std::size_t fill_pattern(std::uint64_t seed, std::uint64_t step, std::byte* data,
                                std::size_t capacity) {
    const std::size_t n = step_bytes(step, capacity);
    for (std::size_t i = 0; i < n; ++i) data[i] = std::byte{pattern_byte(seed, step, i)};
    return n;
}

/// Index of the first byte of `data` (host memory) differing from the pattern; n if none.
inline std::size_t first_mismatch(std::uint64_t seed, std::uint64_t step, const std::byte* data,
                                  std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
        if (data[i] != std::byte{pattern_byte(seed, step, i)}) return i;
    }
    return n;
}

}  // namespace stage_test
