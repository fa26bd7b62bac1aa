#pragma once
// The fixed fields of a dataset mapped from their files' pages (internal): how the memory tier
// stages with `StageRead::map` (docs/architecture.md, "Memory tier").

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "mpistage/source.hpp"
#include "sources/file_rows.hpp"

namespace mpistage::detail {

/// How a mapped field's rows are copied out (`read_mapped`). Rows of at least
/// `kKernelCopyRowBytes`, read at least `kKernelCopyIdle` after the tier's previous read ended
/// (by any thread), are copied with `pread` from the file, whose pages the mapping keeps locked in
/// the page cache; all others with loads through the mapping. Measured on this project's 2-core
/// VM (benchmarks/README.md, "Large rows after an idle reader" and "Warm epochs"): after the
/// reader slept 10–25.75 ms (a trainer computing between steps) loads of 64–150 KB rows ran at
/// 0.56–0.82x `pread`, which copies through the kernel's own mapping of memory; after 0.1–2 ms
/// idle loads were faster (1.2–1.5x), and back to back the loader's own steady epochs ran about
/// 3x faster with loads (the microbenchmark is erratic there). Small rows stay on loads: a system
/// call per row (about 2 µs here) would cost more than copying a row of a few hundred bytes.
/// 64 KiB is a conservative bound, not a measured crossover.
constexpr std::uint64_t kKernelCopyRowBytes = std::uint64_t{64} << 10;
/// See `kKernelCopyRowBytes`: I/O threads that keep up with their consumer read back to back or
/// wait a few milliseconds for a peer's step; ones that wait for a trainer's compute wait
/// longer. 5 ms is where the two copies ran level (`copy_after_idle`, two processes, the
/// mapping advised huge pages). The earlier 1 ms sent the reads after every wait for a peer
/// through the kernel and slowed a 150 KB global shuffle without compute 1.4–2.2x (paired runs).
constexpr std::chrono::microseconds kKernelCopyIdle{5000};

/// True when rows of `row_bytes` read `idle` after the tier's previous read ended are copied
/// with `pread` (`kKernelCopyRowBytes`). Pure.
inline bool copy_through_kernel(std::uint64_t row_bytes, std::chrono::nanoseconds idle) noexcept {
    return row_bytes >= kKernelCopyRowBytes && idle >= kKernelCopyIdle;
}

/// Rows `[0, num_rows)` of one fixed field, mapped read-only (`MAP_SHARED`) from the file that
/// holds them back to back, so every rank of a node reads the same page-cache pages. `map`
/// reserves address space only (advised `MADV_HUGEPAGE`); `read_in` brings a range of rows into
/// memory and `lock` keeps it there. Move-only; unmaps (and so unlocks) on destruction. `row` and
/// `check_file` are thread-safe. Refusals that are the system's, not the file's (a file system that
/// cannot map, address space or lock limits, an old kernel), come back as text so the caller can
/// copy instead; faults of the file are IoErrors.
class MappedRows {
public:
    MappedRows() = default;
    /// Local; maps nothing yet. @throws IoError naming the file when the rows do not lie inside
    /// the file as it was opened.
    MappedRows(const FileRows& where, std::uint64_t row_bytes, std::uint64_t num_rows);
    MappedRows(MappedRows&& o) noexcept;
    MappedRows& operator=(MappedRows&& o) noexcept;
    MappedRows(const MappedRows&) = delete;
    MappedRows& operator=(const MappedRows&) = delete;
    ~MappedRows();

    /// Local: maps the rows (`mmap`), advises huge pages on the mapping (`MADV_HUGEPAGE`: pages
    /// read in later come in 2 MiB page-cache folios where the kernel and file system support
    /// them; a refusal of the advice is ignored) and notes the file's size and times (`fstat`)
    /// for `check_file`. Returns an empty string, or why the mapping was refused (errno text:
    /// ENODEV on a file system that cannot map, ENOMEM under an address-space limit). Never
    /// throws.
    std::string map() noexcept;
    /// First byte of row `r` (r < num_rows), after `map`.
    const std::byte* row(std::uint64_t r) const noexcept { return rows_ + r * row_bytes_; }
    std::uint64_t row_bytes() const noexcept { return row_bytes_; }
    /// Bytes of all rows (`row(0)` starts them), after `map`.
    std::uint64_t bytes() const noexcept { return rows_ != nullptr ? bytes_ : 0; }
    /// Local: reads the pages of rows `[first, first + count)` in from the file and maps them
    /// into this process (`madvise(MADV_POPULATE_READ)`, Linux ≥ 5.14), which reports a failed
    /// read instead of a later SIGBUS. Returns an empty string, or why the kernel refused for a
    /// reason of its own (EINVAL: a kernel before 5.14 or a mapping it cannot populate; ENOMEM;
    /// EPERM; EAGAIN). @throws IoError naming the file and the byte range when the pages cannot
    /// be read: a file shorter than the rows (EFAULT: truncated since it was opened), a read
    /// error (EIO, EHWPOISON).
    std::string read_in(std::uint64_t first, std::uint64_t count) const;
    /// Local: locks the pages of rows `[first, first + count)` in memory (`mlock`), widened to
    /// 2 MiB boundaries within the mapping (so a 2 MiB folio across the edge of the rows is
    /// locked whole: up to 4 MiB more than the rows), so they are never evicted and later reads
    /// never go to the file. Returns an empty string, or why the lock was refused (errno text
    /// and RLIMIT_MEMLOCK). Never throws.
    std::string lock(std::uint64_t first, std::uint64_t count) const noexcept;
    /// Local, one `fstat`: @throws StagedFileChanged (an IoError) naming the file when its
    /// size, modification or change time differ from what they were at `map`: pages read since
    /// may be zeros (a truncation inside a page zero-fills the rest of it, without SIGBUS) or
    /// another version's.
    void check_file() const;
    const std::string& path() const noexcept { return path_; }
    int fd() const noexcept { return fd_; }
    /// Local, thread-safe: copies row `r` (r < num_rows) into `dst` with `pread` from the file
    /// (retried on EINTR and short reads). @throws StagedFileChanged naming the file and byte
    /// range when the file ends inside the row (truncated since staging); IoError naming them
    /// on a read error.
    void pread_row(std::uint64_t r, std::byte* dst) const;

private:
    /// The page-aligned span `[begin, begin + bytes)` of the mapping that holds rows
    /// `[first, first + count)`.
    void span(std::uint64_t first, std::uint64_t count, std::byte*& begin,
              std::size_t& bytes) const;
    void release() noexcept;

    int fd_ = -1;               ///< the source's descriptor (not owned)
    std::byte* map_ = nullptr;  ///< start of the mapping (page-aligned)
    std::size_t map_bytes_ = 0;
    const std::byte* rows_ = nullptr;  ///< row 0
    std::uint64_t row_bytes_ = 0;
    std::uint64_t file_offset_ = 0;  ///< of row 0
    std::uint64_t bytes_ = 0;        ///< of all rows
    std::string path_;
    off_t mapped_size_ = 0;  ///< st_size at `map`
    timespec mapped_mtime_{};
    timespec mapped_ctime_{};
};

/// Local, thread-safe: copies the rows `ids[0, count)` of every field `f` (`fields[f]`, the
/// source's fixed fields in order) into `sink.fixed(f, k)`: with `pread_row` where
/// `copy_through_kernel` says so for `idle` (since the tier's previous read ended), else with
/// loads from the mapping under the SIGBUS guard.
/// `ids` must be below every field's row count. @throws StagedFileChanged naming the files when
/// a mapped page could not be loaded (SIGBUS) or a row lies past its file's end: the file was
/// truncated after staging; IoError on a read error. Does not check the files' sizes and times
/// afterwards (`check_file`).
void read_mapped(const std::vector<MappedRows>& fields, const std::uint64_t* ids, std::size_t count,
                 BatchSink& sink, std::chrono::nanoseconds idle);

/// Rows this process copied with `pread_row` since it started (a test hook: which way a field
/// was read). Thread-safe (an atomic, counted per `read_mapped` call).
std::uint64_t kernel_row_reads() noexcept;

/// Local, thread-safe: makes sure the process's SIGBUS disposition is the guard's handler
/// (`SA_SIGINFO | SA_NODEFER`), installing it when it is not (first call, or another library
/// replaced it since), and keeping the disposition it replaced the first time: every SIGBUS
/// outside `copy_guarded`, or not a load past a mapped file's end (`BUS_ADRERR`,
/// `BUS_OBJERR`; a signal sent by `kill`, a machine-check notice), goes there (the default
/// one, or an ignored one for a fault, ends the process, as before). Call before
/// `copy_guarded`.
void install_sigbus_guard();

/// Local, thread-safe: runs `copy(arg)` with SIGBUS faults caught on this thread; returns false
/// when a load raised one (a mapped page past the end of its file: the file was truncated
/// after it was mapped), true otherwise. `copy` may only load from mappings and store to memory
/// that cannot fault, and must create no object with a destructor (it is left by
/// `siglongjmp`); an exception it throws passes through.
bool copy_guarded(void (*copy)(void* arg), void* arg);

}  // namespace mpistage::detail
