#include "util/page_populate.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

// Linux 5.14 values, for builds on older headers (the kernel answers EINVAL there).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace mpistage::detail {

std::size_t page_bytes() noexcept {
    const long page_size = sysconf(_SC_PAGE_SIZE);
    return page_size > 0 ? static_cast<std::size_t>(page_size) : 4096;
}

bool populate_pages(void* p, std::size_t size_bytes, PopulateFor what) noexcept {
    if (p == nullptr || size_bytes == 0) return true;
    const auto page = static_cast<std::uintptr_t>(page_bytes());
    const auto begin = reinterpret_cast<std::uintptr_t>(p) / page * page;
    const auto end = (reinterpret_cast<std::uintptr_t>(p) + size_bytes + page - 1) / page * page;
    const int advice = what == PopulateFor::read ? MADV_POPULATE_READ : MADV_POPULATE_WRITE;
    if (madvise(reinterpret_cast<void*>(begin), end - begin, advice) == 0) return true;
    // EINVAL: a kernel without MADV_POPULATE_*; touch each page of the caller's range instead.
    // Any other failure (EFAULT: a mapped file shorter than the range) leaves the pages alone,
    // where a touch would raise SIGBUS.
    if (errno != EINVAL) return false;
    if (what == PopulateFor::read) {
        touch_pages(p, size_bytes);
        return false;
    }
    auto* bytes = static_cast<volatile unsigned char*>(p);
    const auto first = reinterpret_cast<std::uintptr_t>(p);
    for (std::uintptr_t at = first; at < first + size_bytes; at = (at / page + 1) * page) {
        volatile unsigned char* b = bytes + (at - first);
        *b = *b;  // a store of the byte already there: mapped writable, contents unchanged
    }
    return false;
}

void touch_pages(const void* p, std::size_t size_bytes) noexcept {
    if (p == nullptr || size_bytes == 0) return;
    const auto page = static_cast<std::uintptr_t>(page_bytes());
    const auto* bytes = static_cast<const volatile unsigned char*>(p);
    const auto first = reinterpret_cast<std::uintptr_t>(p);
    unsigned char sink = 0;
    for (std::uintptr_t at = first; at < first + size_bytes; at = (at / page + 1) * page) {
        sink = static_cast<unsigned char>(sink ^ bytes[at - first]);
    }
    static_cast<void>(sink);
}

}  // namespace mpistage::detail
