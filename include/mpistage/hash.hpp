#pragma once
/// @file
/// The two non-cryptographic hashes mpistage uses for keys and fingerprints. Pure functions,
/// thread-safe, the same on every platform (ranks compare their results).

#include <cstdint>
#include <string>

namespace mpistage {

/// splitmix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014); mixes one 64-bit word. Used for permutation keys and fingerprints. Inline:
/// the global shuffle calls it four times per sample.
inline std::uint64_t mix64(std::uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/// FNV-1a 64-bit hash of a string (Fowler, Noll, Vo; offset basis 0xcbf29ce484222325,
/// prime 0x100000001b3). Used to compare strings across ranks with one integer.
std::uint64_t fnv1a64(const std::string& s) noexcept;

}  // namespace mpistage
