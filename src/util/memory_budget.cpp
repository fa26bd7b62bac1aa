#include "util/memory_budget.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "mpistage/error.hpp"

namespace mpistage::detail {

std::uint64_t memory_share_bytes(int ranks_on_node) noexcept {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_size <= 0) return 0;
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size) / 2 /
           static_cast<std::uint64_t>(std::max(1, ranks_on_node));
}

void check_memory_share(std::uint64_t bytes, int ranks_on_node, const std::string& what,
                        const std::string& advice) {
    const std::uint64_t share = memory_share_bytes(ranks_on_node);
    if (share == 0 || bytes <= share) return;
    throw ConfigError(what + " needs " + std::to_string(bytes) +
                      " bytes on each rank, more than its share of this node's memory (half of "
                      "it divided among " +
                      std::to_string(std::max(1, ranks_on_node)) + " rank(s): " +
                      std::to_string(share) + " bytes); " + advice);
}

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) noexcept {
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
        return std::numeric_limits<std::uint64_t>::max();
    }
    return a * b;
}

std::uint64_t resident_bytes() noexcept {
    try {
        std::ifstream in("/proc/self/status");
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("VmRSS:", 0) != 0) continue;
            std::istringstream s(line.substr(6));
            std::uint64_t kib = 0;
            s >> kib;
            return kib * 1024;
        }
    } catch (...) {
    }
    return 0;
}

}  // namespace mpistage::detail
