#pragma once
// The fixed fields of a dataset mapped from their files' pages (internal): how the memory tier
// stages with `StageRead::map` (docs/architecture.md, "Memory tier").

#include <cstddef>
#include <cstdint>
#include <string>

#include "sources/file_rows.hpp"

namespace mpistage::detail {

/// Rows `[0, num_rows)` of one fixed field, mapped read-only (`MAP_SHARED`) from the file that
/// holds them back to back, so every rank of a node reads the same page-cache pages. Mapping
/// reserves address space only; `read_in` brings a range of rows into memory and `lock` keeps
/// it there. Move-only; unmaps (and so unlocks) on destruction. `row` is thread-safe.
class MappedRows {
public:
    MappedRows() = default;
    /// Local. @throws IoError naming the file when the rows do not lie inside the file as it
    /// was opened, or `mmap` fails (errno text).
    MappedRows(const FileRows& where, std::uint64_t row_bytes, std::uint64_t num_rows);
    MappedRows(MappedRows&& o) noexcept;
    MappedRows& operator=(MappedRows&& o) noexcept;
    MappedRows(const MappedRows&) = delete;
    MappedRows& operator=(const MappedRows&) = delete;
    ~MappedRows();

    /// First byte of row `r` (r < num_rows).
    const std::byte* row(std::uint64_t r) const noexcept { return rows_ + r * row_bytes_; }
    /// Local: reads the pages of rows `[first, first + count)` in from the file and maps them
    /// into this process (`MADV_POPULATE_READ`, Linux ≥ 5.14), which reports a failed read
    /// instead of a later SIGBUS. @throws IoError naming the file and the byte range: a read
    /// error, or a file shorter than the rows (truncated since it was opened).
    /// Returns false, having done nothing, on a kernel without MADV_POPULATE_READ (EINVAL).
    bool read_in(std::uint64_t first, std::uint64_t count) const;
    /// Local: locks the pages of rows `[first, first + count)` in memory (`mlock`), so they are
    /// never evicted and later reads never go to the file. Returns an empty string, or why the
    /// lock was refused (errno text and RLIMIT_MEMLOCK). Never throws.
    std::string lock(std::uint64_t first, std::uint64_t count) const noexcept;
    const std::string& path() const noexcept { return path_; }

private:
    /// The page-aligned span `[begin, end)` of the mapping that holds rows `[first, +count)`.
    void span(std::uint64_t first, std::uint64_t count, std::byte*& begin, std::size_t& bytes) const;
    void release() noexcept;

    std::byte* map_ = nullptr;  ///< start of the mapping (page-aligned)
    std::size_t map_bytes_ = 0;
    const std::byte* rows_ = nullptr;  ///< row 0
    std::uint64_t row_bytes_ = 0;
    std::uint64_t file_offset_ = 0;  ///< of row 0
    std::string path_;
};

/// Local, thread-safe: runs `copy(arg)` with SIGBUS caught on this thread; returns false when a
/// load from a mapped page raised SIGBUS (the file was truncated after it was mapped), true
/// otherwise. `copy` may only load from mappings and store to memory that cannot fault, and
/// must create no object with a destructor (it is left by `siglongjmp`); an exception it throws
/// passes through. The first call installs a process-wide SIGBUS handler (`SA_NODEFER`) that
/// hands every SIGBUS outside such a call to the disposition that was there before (the
/// default one ends the process, as before).
bool copy_guarded(void (*copy)(void* arg), void* arg);

}  // namespace mpistage::detail
