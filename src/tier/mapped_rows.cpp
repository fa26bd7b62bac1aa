#include "tier/mapped_rows.hpp"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "pipeline/fill.hpp"
#include "util/page_populate.hpp"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14 (include/uapi/asm-generic/mman-common.h)
#endif

namespace mpistage::detail {

namespace {

std::string range_text(std::uint64_t begin, std::uint64_t end) {
    return "bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

MappedRows::MappedRows(const FileRows& where, std::uint64_t row_bytes, std::uint64_t num_rows)
    : fd_(where.fd),
      row_bytes_(row_bytes),
      file_offset_(where.offset),
      bytes_(checked_mul(row_bytes, num_rows, "stage: mapped rows")),
      path_(where.path) {
    if (where.offset > where.file_bytes || bytes_ > where.file_bytes - where.offset) {
        throw IoError(
            "stage: " + path_ + ": rows at " + range_text(where.offset, where.offset + bytes_) +
            " do not lie inside the file of " + std::to_string(where.file_bytes) + " bytes");
    }
}

std::string MappedRows::map() noexcept {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return "fstat of " + path_ + " failed: " + std::strerror(errno);
    mapped_size_ = st.st_size;
    mapped_mtime_ = st.st_mtim;
    mapped_ctime_ = st.st_ctim;
    if (bytes_ == 0) return {};
    const std::uint64_t page = page_bytes();
    const std::uint64_t start = file_offset_ / page * page;
    const auto bytes = static_cast<std::size_t>(file_offset_ - start + bytes_);
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd_, static_cast<off_t>(start));
    if (p == MAP_FAILED) {
        return "mmap of " + range_text(start, file_offset_ + bytes_) + " of " + path_ +
               " refused (" + std::strerror(errno) + ")";
    }
    // Where the kernel supports it (transparent huge pages, and large page-cache folios in the
    // file system: XFS since Linux 5.18, ext4 since 6.16), file pages read in through this
    // mapping come in 2 MiB folios and are mapped 2 MiB at a time; the kernel aligns the
    // address with the file offset for that. On the benchmark VM a process's first load of a
    // 4 KiB-mapped page costs 0.2–1.6 µs even after MADV_POPULATE_READ, and of a 2 MiB-mapped
    // file 0.04 µs per 4 KiB (benchmarks/README.md, "Huge pages of the page cache"). Pages
    // already cached in smaller folios may stay as they are. A read-in also reads the rest of
    // the 2 MiB blocks at a shard's edges (pages of the neighbours' shards, on the same node).
    // Advice only: a kernel without transparent huge pages refuses it (EINVAL) and nothing
    // changes.
    (void)::madvise(p, bytes, MADV_HUGEPAGE);
    map_ = static_cast<std::byte*>(p);
    map_bytes_ = bytes;
    rows_ = map_ + (file_offset_ - start);
    return {};
}

MappedRows::MappedRows(MappedRows&& o) noexcept
    : fd_(o.fd_),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      rows_(std::exchange(o.rows_, nullptr)),
      row_bytes_(o.row_bytes_),
      file_offset_(o.file_offset_),
      bytes_(o.bytes_),
      path_(std::move(o.path_)),
      mapped_size_(o.mapped_size_),
      mapped_mtime_(o.mapped_mtime_),
      mapped_ctime_(o.mapped_ctime_) {}

MappedRows& MappedRows::operator=(MappedRows&& o) noexcept {
    if (this != &o) {
        release();
        map_ = std::exchange(o.map_, nullptr);
        map_bytes_ = std::exchange(o.map_bytes_, 0);
        rows_ = std::exchange(o.rows_, nullptr);
        fd_ = o.fd_;
        row_bytes_ = o.row_bytes_;
        file_offset_ = o.file_offset_;
        bytes_ = o.bytes_;
        path_ = std::move(o.path_);
        mapped_size_ = o.mapped_size_;
        mapped_mtime_ = o.mapped_mtime_;
        mapped_ctime_ = o.mapped_ctime_;
    }
    return *this;
}

MappedRows::~MappedRows() {
    release();
}

void MappedRows::release() noexcept {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    map_ = nullptr;
    map_bytes_ = 0;
    rows_ = nullptr;
}

void MappedRows::span(std::uint64_t first, std::uint64_t count, std::byte*& begin,
                      std::size_t& bytes) const {
    begin = nullptr;
    bytes = 0;
    if (map_ == nullptr || count == 0 || row_bytes_ == 0) return;
    const std::uint64_t page = page_bytes();
    const auto lo = static_cast<std::uint64_t>(row(first) - map_);
    const std::uint64_t hi = lo + count * row_bytes_;
    const std::uint64_t lo_page = lo / page * page;
    begin = map_ + lo_page;
    bytes = static_cast<std::size_t>(
        std::min<std::uint64_t>((hi + page - 1) / page * page, map_bytes_) - lo_page);
}

std::string MappedRows::read_in(std::uint64_t first, std::uint64_t count) const {
    std::byte* begin = nullptr;
    std::size_t bytes = 0;
    span(first, count, begin, bytes);
    if (bytes == 0 || ::madvise(begin, bytes, MADV_POPULATE_READ) == 0) return {};
    const int err = errno;
    const std::uint64_t at = file_offset_ + first * row_bytes_;
    const std::string what = "reading " + range_text(at, at + count * row_bytes_) + " of " + path_ +
                             " into memory (madvise(MADV_POPULATE_READ)): " + std::strerror(err);
    if (err == EINVAL) {
        return what + " (a kernel before Linux 5.14, or a mapping it cannot populate)";
    }
    if (err == ENOMEM || err == EPERM || err == EAGAIN || err == EINTR) return what;
    throw IoError("stage: " + what +
                  (err == EFAULT ? " (the file is shorter than when it was opened)" : ""));
}

std::string MappedRows::lock(std::uint64_t first, std::uint64_t count) const noexcept {
    std::byte* begin = nullptr;
    std::size_t bytes = 0;
    span(first, count, begin, bytes);
    if (bytes != 0) {
        // Out to 2 MiB boundaries (within the mapping): Linux mlocks a large folio only when
        // the locked range holds all of it, so a folio across a shard's edge, half locked by
        // each neighbour, would stay evictable; and a lock ending inside a 2 MiB mapping
        // splits it into 4 KiB entries.
        constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
        const auto lo = reinterpret_cast<std::uintptr_t>(begin);
        const auto map_lo = reinterpret_cast<std::uintptr_t>(map_);
        const std::uintptr_t map_hi = map_lo + map_bytes_;
        const std::uintptr_t wide_lo = std::max(map_lo, lo / kHuge * kHuge);
        const std::uintptr_t wide_hi = std::min(map_hi, (lo + bytes + kHuge - 1) / kHuge * kHuge);
        begin = map_ + (wide_lo - map_lo);
        bytes = static_cast<std::size_t>(wide_hi - wide_lo);
    }
    if (bytes == 0 || ::mlock(begin, bytes) == 0) return {};
    const int err = errno;
    std::string why = "mlock of " + std::to_string(bytes) + " bytes of " + path_ + " refused (" +
                      std::strerror(err) + ")";
    rlimit lim{};
    if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
        why += "; RLIMIT_MEMLOCK is " +
               (lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                              : std::to_string(lim.rlim_cur) + " bytes") +
               " (ulimit -l; Slurm propagates it from the submitting shell)";
    }
    return why;
}

void MappedRows::check_file() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
        throw IoError("tier: " + path_ + ": fstat failed: " + std::strerror(errno));
    }
    const auto same = [](const timespec& a, const timespec& b) {
        return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
    };
    if (st.st_size != mapped_size_ || !same(st.st_mtim, mapped_mtime_) ||
        !same(st.st_ctim, mapped_ctime_)) {
        throw StagedFileChanged("tier: " + path_ + " changed after it was staged (" +
                      std::to_string(mapped_size_) + " bytes when mapped, " +
                      std::to_string(st.st_size) +
                      " now): a mapped file must not be truncated or rewritten while the loader "
                      "lives (stage_read copy keeps a private copy)");
    }
}

namespace {

// The only thread_local of this file, and it must stay so. Initial-exec: the SIGBUS handler
// reads it, and __tls_get_addr is not async-signal-safe. gold (binutils 2.40, which
// scripts/test.sh links with) resolves an initial-exec access to a local thread_local of a
// shared library against the start of its object's .tbss: with a second thread_local here,
// stores to t_guard landed on another library variable (RawSource's scratch guard; a double
// free at exit, found when one was added).
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous_bus {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
    const int code = info != nullptr ? info->si_code : 0;
    // Only a load past the end of a mapped file (BUS_ADRERR; BUS_OBJERR: the file's page
    // could not be read) inside a guarded copy. Not a SIGBUS sent by kill (si_code <= 0), nor a
    // machine-check notice (BUS_MCEERR_AO/AR), which are not the mapping's.
    if (t_guard != nullptr && (code == BUS_ADRERR || code == BUS_OBJERR)) {
        siglongjmp(*t_guard, 1);
    }
    const bool siginfo = (g_previous_bus.sa_flags & SA_SIGINFO) != 0;
    if (siginfo && g_previous_bus.sa_sigaction != nullptr) {
        g_previous_bus.sa_sigaction(sig, info, context);
    } else if (!siginfo && g_previous_bus.sa_handler != SIG_DFL &&
               g_previous_bus.sa_handler != SIG_IGN) {
        g_previous_bus.sa_handler(sig);
    } else if (siginfo || g_previous_bus.sa_handler == SIG_DFL || code > 0) {
        // The default action (also for a fault where SIGBUS was ignored: the kernel would have
        // reset it, and returning would re-run the load forever): a fault re-runs its load on
        // return and meets it; a sent signal is raised again.
        ::signal(SIGBUS, SIG_DFL);
        if (code <= 0) ::raise(SIGBUS);
    }
}

/// Clears the thread's guard however `copy_guarded` is left.
struct GuardReset {
    ~GuardReset() { t_guard = nullptr; }
};

}  // namespace

void install_sigbus_guard() {
    static std::mutex mutex;
    static bool saved = false;
    const std::lock_guard<std::mutex> lock(mutex);
    struct sigaction current {};
    ::sigaction(SIGBUS, nullptr, &current);
    if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_sigbus) return;
    // The disposition before the first install is the one every other SIGBUS goes to, kept
    // once (written before the handler can run): a library that replaced the guard's handler
    // since may chain to it, and keeping its handler instead would make a loop.
    if (!saved) {
        g_previous_bus = current;
        saved = true;
    }
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sigemptyset(&sa.sa_mask);
    // SA_NODEFER: SIGBUS stays unblocked after siglongjmp leaves the handler.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    ::sigaction(SIGBUS, &sa, nullptr);
}

void MappedRows::pread_row(std::uint64_t r, std::byte* dst) const {
    const std::uint64_t at = file_offset_ + r * row_bytes_;
    std::uint64_t done = 0;
    while (done < row_bytes_) {
        const ssize_t n = ::pread(fd_, dst + done, static_cast<std::size_t>(row_bytes_ - done),
                                  static_cast<off_t>(at + done));
        if (n > 0) {
            done += static_cast<std::uint64_t>(n);
            continue;
        }
        const int err = errno;
        if (n < 0 && err == EINTR) continue;
        const std::string where = range_text(at, at + row_bytes_) + " of " + path_;
        if (n == 0) {
            throw StagedFileChanged("tier: " + path_ + " ends at byte " +
                                    std::to_string(at + done) + ", inside " + where +
                                    ": the file was truncated after it was staged");
        }
        throw IoError("tier: reading " + where + " failed: " + std::strerror(err));
    }
}

namespace {

std::atomic<std::uint64_t> g_kernel_row_reads{0};

/// One `read_mapped` of the rows read by loads, for `copy_guarded`.
struct LoadCopy {
    const std::vector<MappedRows>* fields;
    std::chrono::nanoseconds idle;  ///< rows `copy_through_kernel` takes are skipped
    const std::uint64_t* ids;
    std::size_t count;
    BatchSink* sink;
};

void copy_loaded_rows(void* arg) {
    const auto& c = *static_cast<const LoadCopy*>(arg);
    for (std::size_t f = 0; f < c.fields->size(); ++f) {
        const MappedRows& m = (*c.fields)[f];
        if (copy_through_kernel(m.row_bytes(), c.idle)) continue;
        for (std::size_t k = 0; k < c.count; ++k) {
            std::memcpy(c.sink->fixed(f, k), m.row(c.ids[k]), m.row_bytes());
        }
    }
}

}  // namespace

void read_mapped(const std::vector<MappedRows>& fields, const std::uint64_t* ids, std::size_t count,
                 BatchSink& sink, std::chrono::nanoseconds idle) {
    std::uint64_t through_kernel = 0;
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (!copy_through_kernel(fields[f].row_bytes(), idle)) continue;
        for (std::size_t k = 0; k < count; ++k) fields[f].pread_row(ids[k], sink.fixed(f, k));
        through_kernel += count;
    }
    if (through_kernel > 0) g_kernel_row_reads.fetch_add(through_kernel, std::memory_order_relaxed);
    if (through_kernel == count * fields.size()) return;
    LoadCopy c{&fields, idle, ids, count, &sink};
    if (copy_guarded(copy_loaded_rows, &c)) return;
    std::string paths;
    for (const MappedRows& m : fields) {
        if (paths.find(m.path()) == std::string::npos)
            paths += (paths.empty() ? "" : ", ") + m.path();
    }
    throw StagedFileChanged("tier: a mapped page of " + paths +
                            " could not be read (SIGBUS): the file was truncated after it "
                            "was staged");
}

std::uint64_t kernel_row_reads() noexcept {
    return g_kernel_row_reads.load(std::memory_order_relaxed);
}

bool copy_guarded(void (*copy)(void* arg), void* arg) {
    const GuardReset reset;
    sigjmp_buf jump;
    if (sigsetjmp(jump, 0) != 0) return false;
    t_guard = &jump;
    copy(arg);
    return true;
}

}  // namespace mpistage::detail
