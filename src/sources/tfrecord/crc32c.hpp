#pragma once
/// @file
/// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected) and the masked form used by TFRecord
/// framing (TensorFlow `tensorflow/core/lib/hash/crc32c.h`, `record_writer.cc`).

#include <cstddef>
#include <cstdint>

namespace mpistage {

/// CRC32C of `size_bytes` bytes at `data`, continuing from `init` (the CRC32C of the bytes
/// before, 0 for a fresh start): `crc32c(b, nb, crc32c(a, na)) == crc32c(a ‖ b)`.
/// Check value: `crc32c("123456789", 9) == 0xE3069283`.
/// Uses ISA-L's hardware-accelerated `crc32_iscsi` (SSE4.2/PCLMUL, ARMv8 CRC) in pieces of at
/// most 1 GiB. Not collective; thread-safe; never throws.
std::uint32_t crc32c(const void* data, std::size_t size_bytes, std::uint32_t init = 0) noexcept;

/// Bit-at-a-time reference CRC32C with the same contract as `crc32c` (for tests and the
/// benchmark only: roughly 100× slower). Not collective; thread-safe; never throws.
std::uint32_t crc32c_reference(const void* data, std::size_t size_bytes,
                               std::uint32_t init = 0) noexcept;

/// Table-driven (one table lookup per byte) reference CRC32C, same contract as `crc32c`.
/// Not collective; thread-safe; never throws.
std::uint32_t crc32c_table(const void* data, std::size_t size_bytes,
                           std::uint32_t init = 0) noexcept;

/// The TFRecord mask of a CRC32C: `((crc >> 15) | (crc << 17)) + 0xa282ead8`
/// (TensorFlow `crc32c::Mask`). Pure.
constexpr std::uint32_t mask_crc32c(std::uint32_t crc) noexcept {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// Inverse of `mask_crc32c` (TensorFlow `crc32c::Unmask`). Pure.
constexpr std::uint32_t unmask_crc32c(std::uint32_t masked) noexcept {
    const std::uint32_t rot = masked - 0xa282ead8u;
    return (rot >> 17) | (rot << 15);
}

/// Masked CRC32C of a buffer, as stored in TFRecord framing. Not collective; thread-safe.
inline std::uint32_t masked_crc32c(const void* data, std::size_t size_bytes) noexcept {
    return mask_crc32c(crc32c(data, size_bytes));
}

}  // namespace mpistage
