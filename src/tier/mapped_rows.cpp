#include "tier/mapped_rows.hpp"

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14 (include/uapi/asm-generic/mman-common.h)
#endif

namespace mpistage::detail {

namespace {

std::uint64_t page_bytes() {
    const long p = sysconf(_SC_PAGE_SIZE);
    return p > 0 ? static_cast<std::uint64_t>(p) : 4096;
}

std::string range_text(std::uint64_t begin, std::uint64_t end) {
    return "bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

MappedRows::MappedRows(const FileRows& where, std::uint64_t row_bytes, std::uint64_t num_rows)
    : row_bytes_(row_bytes), file_offset_(where.offset), path_(where.path) {
    const std::uint64_t bytes = checked_mul(row_bytes, num_rows, "stage: mapped rows");
    if (where.offset > where.file_bytes || bytes > where.file_bytes - where.offset) {
        throw IoError("stage: " + path_ + ": rows at " + range_text(where.offset,
                                                                    where.offset + bytes) +
                      " do not lie inside the file of " + std::to_string(where.file_bytes) +
                      " bytes");
    }
    if (bytes == 0) return;
    const std::uint64_t page = page_bytes();
    const std::uint64_t start = where.offset / page * page;
    map_bytes_ = static_cast<std::size_t>(where.offset - start + bytes);
    void* p = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, where.fd,
                     static_cast<off_t>(start));
    if (p == MAP_FAILED) {
        const int err = errno;
        map_bytes_ = 0;
        throw IoError("stage: " + path_ + ": mmap of " +
                      range_text(start, where.offset + bytes) + " failed: " + std::strerror(err));
    }
    map_ = static_cast<std::byte*>(p);
    rows_ = map_ + (where.offset - start);
}

MappedRows::MappedRows(MappedRows&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      rows_(std::exchange(o.rows_, nullptr)),
      row_bytes_(o.row_bytes_),
      file_offset_(o.file_offset_),
      path_(std::move(o.path_)) {}

MappedRows& MappedRows::operator=(MappedRows&& o) noexcept {
    if (this != &o) {
        release();
        map_ = std::exchange(o.map_, nullptr);
        map_bytes_ = std::exchange(o.map_bytes_, 0);
        rows_ = std::exchange(o.rows_, nullptr);
        row_bytes_ = o.row_bytes_;
        file_offset_ = o.file_offset_;
        path_ = std::move(o.path_);
    }
    return *this;
}

MappedRows::~MappedRows() { release(); }

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
    bytes = static_cast<std::size_t>(std::min<std::uint64_t>((hi + page - 1) / page * page,
                                                             map_bytes_) -
                                     lo_page);
}

bool MappedRows::read_in(std::uint64_t first, std::uint64_t count) const {
    std::byte* begin = nullptr;
    std::size_t bytes = 0;
    span(first, count, begin, bytes);
    if (bytes == 0) return true;
    if (::madvise(begin, bytes, MADV_POPULATE_READ) == 0) return true;
    const int err = errno;
    if (err == EINVAL) return false;  // a kernel before 5.14
    const std::uint64_t at = file_offset_ + first * row_bytes_;
    throw IoError("stage: " + path_ + ": reading " + range_text(at, at + count * row_bytes_) +
                  " into memory failed (madvise(MADV_POPULATE_READ): " + std::strerror(err) +
                  (err == EFAULT ? "; the file is shorter than when it was opened" : "") + ")");
}

std::string MappedRows::lock(std::uint64_t first, std::uint64_t count) const noexcept {
    std::byte* begin = nullptr;
    std::size_t bytes = 0;
    span(first, count, begin, bytes);
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

namespace {

thread_local sigjmp_buf* t_guard = nullptr;
struct sigaction g_previous_bus {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
    if (t_guard != nullptr) siglongjmp(*t_guard, 1);
    // Not a guarded copy's: what was there before. Returning from SIG_DFL's stand-in re-runs
    // the faulting load, which now meets the default action.
    if ((g_previous_bus.sa_flags & SA_SIGINFO) != 0 && g_previous_bus.sa_sigaction != nullptr) {
        g_previous_bus.sa_sigaction(sig, info, context);
    } else if ((g_previous_bus.sa_flags & SA_SIGINFO) == 0 &&
               g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN) {
        g_previous_bus.sa_handler(sig);
    } else {
        ::signal(SIGBUS, SIG_DFL);
    }
}

void install_sigbus_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa {};
        sa.sa_sigaction = on_sigbus;
        sigemptyset(&sa.sa_mask);
        // SA_NODEFER: SIGBUS stays unblocked after siglongjmp leaves the handler.
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        ::sigaction(SIGBUS, &sa, &g_previous_bus);
    });
}

/// Clears the thread's guard however `copy_guarded` is left.
struct GuardReset {
    ~GuardReset() { t_guard = nullptr; }
};

}  // namespace

bool copy_guarded(void (*copy)(void* arg), void* arg) {
    install_sigbus_handler();
    const GuardReset reset;
    sigjmp_buf jump;
    if (sigsetjmp(jump, 0) != 0) return false;
    t_guard = &jump;
    copy(arg);
    return true;
}

}  // namespace mpistage::detail
