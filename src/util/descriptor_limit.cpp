// The descriptor limit check before a source opens its files (see descriptor_limit.hpp).
#include "util/descriptor_limit.hpp"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <limits>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

std::uint64_t limit_value(rlim_t v) {
    return v == RLIM_INFINITY ? std::numeric_limits<std::uint64_t>::max()
                              : static_cast<std::uint64_t>(v);
}

std::string limit_text(std::uint64_t v) {
    return v == std::numeric_limits<std::uint64_t>::max() ? "unlimited" : std::to_string(v);
}

}  // namespace

DescriptorUse descriptor_use() noexcept {
    DescriptorUse u;
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        u.soft_limit = limit_value(rl.rlim_cur);
        u.hard_limit = limit_value(rl.rlim_max);
    } else {
        u.soft_limit = u.hard_limit = std::numeric_limits<std::uint64_t>::max();
    }
    // opendir itself holds one descriptor while listing: not counted.
    if (DIR* d = ::opendir("/proc/self/fd")) {
        std::uint64_t n = 0;
        while (const dirent* e = ::readdir(d)) {
            if (e->d_name[0] != '.') ++n;
        }
        ::closedir(d);
        u.open = n > 0 ? n - 1 : 0;
    }
    return u;
}

void require_descriptors(std::uint64_t needed, const std::string& what,
                         const std::string& context) {
    const DescriptorUse u = descriptor_use();
    if (u.open == 0 || u.soft_limit == std::numeric_limits<std::uint64_t>::max()) return;
    const std::uint64_t want = u.open + needed + kOpenDescriptorMargin;
    if (want <= u.soft_limit) return;
    throw IoError(context + ": too few file descriptors to open " + what + ": this rank has " +
                  std::to_string(u.open) + " open and may open at most " +
                  limit_text(u.soft_limit) + " (RLIMIT_NOFILE soft limit, `ulimit -n`; hard " +
                  "limit " + limit_text(u.hard_limit) + "); opening needs about " +
                  std::to_string(needed + kOpenDescriptorMargin) + " more: raise the limit " +
                  "(e.g. `ulimit -n " + std::to_string(std::max<std::uint64_t>(want, 1024)) +
                  "` in the job script) or open fewer files");
}

std::string descriptor_note() noexcept {
    try {
        const DescriptorUse u = descriptor_use();
        if (u.open == 0 || u.open + kOpenDescriptorMargin < u.soft_limit) return "";
        return " (" + std::to_string(u.open) + " of the " + limit_text(u.soft_limit) +
               " file descriptors allowed are open: RLIMIT_NOFILE, raise it with `ulimit -n`)";
    } catch (...) {
        return "";
    }
}

}  // namespace mpistage::detail
