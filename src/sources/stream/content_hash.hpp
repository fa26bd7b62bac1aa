#pragma once
// The one definition of a stream sample's content hash (`sample_content_hash`: FNV-1a 64 over
// every field's byte count, 8 bytes little-endian, then its bytes, in field order), shared by
// the hash of a StreamSample (src/sources/stream/stream_source.cpp) and of a batch slot
// (src/loader/stream/stream_options.cpp), which must agree for `--verify` of a stream.

#include <cstddef>
#include <cstdint>

namespace mpistage::detail {

inline constexpr std::uint64_t kContentHashBasis = 0xcbf29ce484222325ULL;
inline constexpr std::uint64_t kContentHashPrime = 0x100000001b3ULL;

/// Local: folds one field of `n` bytes at `p` into the running hash `h`.
inline void content_hash_field(std::uint64_t& h, const std::byte* p, std::uint64_t n) noexcept {
    for (std::uint64_t i = 0; i < 8; ++i) {
        h = (h ^ ((n >> (8 * i)) & 0xff)) * kContentHashPrime;
    }
    for (std::uint64_t i = 0; i < n; ++i) {
        h = (h ^ static_cast<std::uint64_t>(p[i])) * kContentHashPrime;
    }
}

}  // namespace mpistage::detail
