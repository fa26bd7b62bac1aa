#include "util/file_identity.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mpistage/hash.hpp"

namespace mpistage::detail {

namespace {

std::uint64_t hash_range(const PosixFile& file, std::uint64_t offset, std::uint64_t n) {
    std::string bytes(n, '\0');
    file.read_exact(reinterpret_cast<std::byte*>(bytes.data()), n, offset, "file identity");
    return fnv1a64(bytes);
}

}  // namespace

std::string file_identity(const PosixFile& file) {
    constexpr std::uint64_t kEdge = 64 * 1024;
    const std::uint64_t size = file.size_bytes();
    const std::uint64_t n = std::min(kEdge, size);
    return "size=" + std::to_string(size) + " head=" + std::to_string(hash_range(file, 0, n)) +
           " tail=" + std::to_string(hash_range(file, size - n, n));
}

}  // namespace mpistage::detail
