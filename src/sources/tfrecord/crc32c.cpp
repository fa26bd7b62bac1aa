#include "sources/tfrecord/crc32c.hpp"

#include <isa-l/crc.h>

#include <array>
#include <cstring>

namespace mpistage {

namespace {

constexpr std::uint32_t kPolyReflected = 0x82F63B78u;

std::array<std::uint32_t, 256> make_table() noexcept {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
        t[i] = c;
    }
    return t;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size_bytes, std::uint32_t init) noexcept {
    // ISA-L's crc32_iscsi works on the raw register (no pre/post inversion) and takes an int
    // length: the standard CRC32C is ~crc32_iscsi(buf, len, ~init); checked against 0xE3069283.
    auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
    std::uint32_t reg = ~init;
    constexpr std::size_t kPiece = std::size_t{1} << 30;
    while (size_bytes > 0) {
        const std::size_t n = size_bytes < kPiece ? size_bytes : kPiece;
        reg = crc32_iscsi(p, static_cast<int>(n), reg);
        p += n;
        size_bytes -= n;
    }
    return ~reg;
}

std::uint32_t crc32c_reference(const void* data, std::size_t size_bytes,
                               std::uint32_t init) noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint32_t c = ~init;
    for (std::size_t i = 0; i < size_bytes; ++i) {
        c ^= p[i];
        for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
    }
    return ~c;
}

std::uint32_t crc32c_table(const void* data, std::size_t size_bytes, std::uint32_t init) noexcept {
    static const std::array<std::uint32_t, 256> table = make_table();
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint32_t c = ~init;
    for (std::size_t i = 0; i < size_bytes; ++i) c = table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
    return ~c;
}

}  // namespace mpistage
