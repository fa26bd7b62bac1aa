#include "util/file_identity.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mpistage/error.hpp"
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

void check_file_unchanged(const PosixFile& file, const std::string& opened,
                          const std::string& context) {
    const std::uint64_t now = file.current_size_bytes();
    const std::string changed = context + ": " + file.path() + " changed while it was read";
    if (now != file.size_bytes()) {
        throw IoError(changed + " (" + std::to_string(file.size_bytes()) + " bytes at open, " +
                      std::to_string(now) + " now: truncated or rewritten); data read from it " +
                      "may be zeros, nothing is served from it");
    }
    if (file_identity(file) != opened) {
        throw IoError(changed + " (same size, other bytes at its start or end: rewritten); "
                      "nothing is served from it");
    }
}

}  // namespace mpistage::detail
