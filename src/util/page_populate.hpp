#pragma once
// Mapping a range of memory into this process's page table in one call instead of one page
// fault per page (internal; the memory tier's window, docs/architecture.md "Memory tier").

#include <cstddef>

namespace mpistage::detail {

/// The system's page size in bytes (`sysconf(_SC_PAGESIZE)`; 4096 where it fails). Local,
/// thread-safe, never throws.
std::size_t page_bytes() noexcept;

/// What the pages are mapped for.
enum class PopulateFor {
    read,   ///< MADV_POPULATE_READ: map existing pages (a peer's staged segment)
    write,  ///< MADV_POPULATE_WRITE: allocate and map writable pages (a segment to read into)
};

/// Local, thread-safe: maps every page of `[p, p + size_bytes)` (the range is widened to page
/// boundaries, so it must lie inside one mapping that covers those pages) into this process's
/// page table: `madvise(MADV_POPULATE_READ / _WRITE)` where the kernel has it (Linux ≥ 5.14),
/// else a touch pass (one load per page; for `write` one store of the byte already there, so
/// the contents are unchanged either way). Returns true when madvise did it, false after the
/// touch pass. Never throws: population is an optimisation, a failure leaves faults to later
/// (other failures than EINVAL, e.g. EFAULT past the end of a mapped file, touch nothing).
bool populate_pages(void* p, std::size_t size_bytes, PopulateFor what) noexcept;

/// Local, thread-safe: one load from every page of `[p, p + size_bytes)` (the memory tier's
/// touch pass). On the benchmark machine (a virtual machine) a process's first load of a page
/// through a mapping costs 0.2-1.6 us even after MADV_POPULATE_READ mapped it, about 0.04 us
/// per 4 KiB where the process maps a 2 MiB page-cache folio whole. Never throws.
void touch_pages(const void* p, std::size_t size_bytes) noexcept;

}  // namespace mpistage::detail
