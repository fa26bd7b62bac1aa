#include "mpistage/hash.hpp"

namespace mpistage {

std::uint64_t fnv1a64(const std::string& s) noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

}  // namespace mpistage
