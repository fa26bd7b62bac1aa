// How `read_mapped` (src/tier/mapped_rows.hpp) copies mapped rows, without MPI: rows of at
// least 64 KiB go through `pread` only after the tier was idle for `kKernelCopyIdle` (a trainer
// computing), back-to-back reads and small rows load from the mapping, both with the file's
// bytes; a row cut by a truncation is a StagedFileChanged naming the file and where it ends,
// not a short row; the mapping asks for huge pages and its locks
// cover whole 2 MiB blocks.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "pipeline/fill.hpp"
#include "tier/mapped_rows.hpp"

using namespace mpistage;
using namespace std::chrono_literals;
using detail::kKernelCopyIdle;
using detail::kKernelCopyRowBytes;
using detail::MappedRows;

namespace {

constexpr std::uint64_t kRows = 9;
constexpr std::uint64_t kHeader = 5;
constexpr std::uint64_t kBig = kKernelCopyRowBytes + 40;
constexpr std::uint64_t kSmall = 12;

std::byte value(std::uint64_t field, std::uint64_t row, std::uint64_t k) {
    return static_cast<std::byte>((field * 101 + row * 37 + k * 13 + (k >> 8)) & 0xFF);
}

/// One file: a header, then kRows big rows, then kRows small rows (two fields in one file).
class MappedFile {
public:
    MappedFile() {
        char tmpl[] = "/tmp/mpistage_mapped_rows_XXXXXX";
        const int fd = ::mkstemp(tmpl);
        if (fd < 0) throw std::runtime_error("mkstemp failed");
        ::close(fd);
        path_ = tmpl;
        std::ofstream out(path_, std::ios::binary);
        out.write(std::string(kHeader, '\x11').data(), kHeader);
        for (std::uint64_t f = 0; f < 2; ++f) {
            const std::uint64_t bytes = f == 0 ? kBig : kSmall;
            for (std::uint64_t r = 0; r < kRows; ++r) {
                for (std::uint64_t k = 0; k < bytes; ++k) {
                    const auto b = static_cast<char>(value(f, r, k));
                    out.write(&b, 1);
                }
            }
        }
        out.close();
        fd_ = ::open(path_.c_str(), O_RDONLY);
        const std::uint64_t size = kHeader + kRows * (kBig + kSmall);
        detail::FileRows big{fd_, path_, kHeader, size};
        detail::FileRows small{fd_, path_, kHeader + kRows * kBig, size};
        fields_.emplace_back(big, kBig, kRows);
        fields_.emplace_back(small, kSmall, kRows);
        for (MappedRows& m : fields_) {
            const std::string why = m.map();
            if (!why.empty()) throw std::runtime_error(why);
        }
        detail::install_sigbus_guard();
    }
    ~MappedFile() {
        fields_.clear();
        if (fd_ >= 0) ::close(fd_);
        std::remove(path_.c_str());
    }
    const std::vector<MappedRows>& fields() const { return fields_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    int fd_ = -1;
    std::vector<MappedRows> fields_;
};

class VectorSink final : public BatchSink {
public:
    explicit VectorSink(std::size_t slots) : big_(slots * kBig), small_(slots * kSmall) {}
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        return field == 0 ? big_.data() + slot * kBig : small_.data() + slot * kSmall;
    }
    std::byte* ragged(std::size_t, std::size_t, std::uint64_t) override { return nullptr; }
    /// True when slot `s` holds row `row` of the big field.
    bool holds_big(std::size_t s, std::uint64_t row) {
        for (std::uint64_t k = 0; k < kBig; ++k) {
            if (fixed(0, s)[k] != value(0, row, k)) return false;
        }
        return true;
    }
    /// True when slot `s` holds row `row` of both fields.
    bool holds(std::size_t s, std::uint64_t row) {
        if (!holds_big(s, row)) return false;
        for (std::uint64_t k = 0; k < kSmall; ++k) {
            if (fixed(1, s)[k] != value(1, row, k)) return false;
        }
        return true;
    }

private:
    std::vector<std::byte> big_, small_;
};

}  // namespace

TEST(MappedRows, BigRowsThroughTheKernelOnlyAfterIdleBothWaysTheFilesBytes) {
    MappedFile file;
    const std::uint64_t ids[] = {7, 0, 3, 8};
    for (const auto idle : {std::chrono::nanoseconds(0), std::chrono::nanoseconds(kKernelCopyIdle),
                            std::chrono::nanoseconds(25ms)}) {
        VectorSink sink(4);
        const std::uint64_t before = detail::kernel_row_reads();
        detail::read_mapped(file.fields(), ids, 4, sink, idle);
        const std::uint64_t by_kernel = detail::kernel_row_reads() - before;
        // The small field never goes through the kernel; the big one only after idle.
        EXPECT_EQ(by_kernel, idle >= kKernelCopyIdle ? 4u : 0u) << idle.count() << " ns idle";
        for (std::size_t s = 0; s < 4; ++s) {
            EXPECT_TRUE(sink.holds(s, ids[s])) << "slot " << s << ", " << idle.count() << " ns";
        }
    }
    EXPECT_FALSE(detail::copy_through_kernel(kKernelCopyRowBytes - 1, 1s));
    EXPECT_TRUE(detail::copy_through_kernel(kKernelCopyRowBytes, kKernelCopyIdle));
    EXPECT_FALSE(detail::copy_through_kernel(kKernelCopyRowBytes, kKernelCopyIdle - 1ns));
    // The measured bound (benchmarks/README.md, "Warm epochs"): a rank's wait of 2 ms for a
    // peer's step still loads, where loads were faster; a trainer's 10 ms of compute or more
    // goes through the kernel, where `pread` was.
    EXPECT_FALSE(detail::copy_through_kernel(kKernelCopyRowBytes, 2ms));
    EXPECT_TRUE(detail::copy_through_kernel(kKernelCopyRowBytes, 10ms));
    EXPECT_TRUE(detail::copy_through_kernel(224 * 224 * 3, 25750us));
}

// A truncation inside big row 4: after idle its pread comes back short, which must be an error
// naming the file and where it now ends, not a row served with stale or missing bytes.
TEST(MappedRows, ARowCutByATruncationIsStagedFileChangedNamingTheFile) {
    MappedFile file;
    const off_t cut = static_cast<off_t>(kHeader + 4 * kBig + 1000);
    ASSERT_EQ(::truncate(file.path().c_str(), cut), 0);
    const std::uint64_t ids[] = {1, 4};
    VectorSink sink(2);
    try {
        detail::read_mapped(file.fields(), ids, 2, sink, std::chrono::nanoseconds(1s));
        ADD_FAILURE() << "a row past the truncation was read";
    } catch (const detail::StagedFileChanged& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(file.path()), std::string::npos) << what;
        EXPECT_NE(what.find("ends at byte " + std::to_string(cut)), std::string::npos) << what;
    }
    EXPECT_TRUE(sink.holds_big(0, 1)) << "the big row before the cut";
}

namespace {

/// The bounds [lo, hi) and VmFlags of the mapping in /proc/self/smaps that contains `p`.
struct Vma {
    std::uintptr_t lo = 0, hi = 0;
    std::string flags;
};

Vma vma_of(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    std::string line;
    Vma v;
    bool inside = false;
    while (std::getline(smaps, line)) {
        unsigned long lo = 0, hi = 0;
        char dash = 0;
        if (std::sscanf(line.c_str(), "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-') {
            inside = lo <= at && at < hi;
            if (inside) v = {lo, hi, {}};
        } else if (inside && line.rfind("VmFlags:", 0) == 0) {
            v.flags = line;
            return v;
        }
    }
    return {};
}

}  // namespace

// The mapping asks for the page cache's 2 MiB folios (MADV_HUGEPAGE): a cold file is read in
// 2 MiB at a time and every process maps it 2 MiB at a time, instead of paying a first load per
// 4 KiB page (benchmarks/README.md, "Huge pages of the page cache"). Linux shows the advice as
// "hg" in the mapping's VmFlags.
TEST(MappedRows, TheMappingAsksForHugePages) {
    if (::access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0) {
        GTEST_SKIP() << "this kernel has no transparent huge pages: the advice is refused";
    }
    MappedFile file;
    const std::string flags = vma_of(file.fields()[0].row(0)).flags;
    ASSERT_FALSE(flags.empty()) << "no mapping holds row 0 in /proc/self/smaps";
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

// `lock` widens the rows' pages to 2 MiB boundaries within the mapping: Linux locks a 2 MiB
// folio only when the locked range holds all of it, so a folio across a shard's edge, half
// locked by each neighbour, would stay evictable. The locked part of the mapping is its own
// mapping in /proc/self/smaps (VmFlags "lo"), starting and ending on 2 MiB boundaries or at
// the mapping's ends.
TEST(MappedRows, LockWidensToTwoMiBBoundaries) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "the sanitizers' mlock interceptor returns 0 and locks nothing";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    GTEST_SKIP() << "the sanitizers' mlock interceptor returns 0 and locks nothing";
#endif
#endif
    constexpr std::uint64_t kRow = 4096;
    constexpr std::uint64_t kCount = 1600;  // 6.25 MiB
    constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
    char tmpl[] = "/tmp/mpistage_mapped_lock_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    const std::string path = tmpl;
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(kHeader + kRow * kCount)), 0);
    {
        MappedRows rows(detail::FileRows{fd, path, kHeader, kHeader + kRow * kCount}, kRow, kCount);
        ASSERT_EQ(rows.map(), "");
        const std::uint64_t first = 700, count = 300;  // about 2.7 MiB to 3.9 MiB
        ASSERT_EQ(rows.read_in(first, count), "");
        const std::string why = rows.lock(first, count);
        if (!why.empty()) {
            ::close(fd);
            std::remove(path.c_str());
            GTEST_SKIP() << "mlock refused here: " << why;
        }
        const Vma locked = vma_of(rows.row(first));
        const Vma start = vma_of(rows.row(0));
        const Vma end = vma_of(rows.row(kCount - 1));
        const auto row_lo = reinterpret_cast<std::uintptr_t>(rows.row(first));
        const auto row_hi = reinterpret_cast<std::uintptr_t>(rows.row(first + count));
        EXPECT_NE(locked.flags.find(" lo"), std::string::npos) << locked.flags;
        EXPECT_LE(locked.lo, row_lo);
        EXPECT_GE(locked.hi, row_hi);
        EXPECT_TRUE(locked.lo % kHuge == 0 || locked.lo == start.lo) << std::hex << locked.lo;
        EXPECT_TRUE(locked.hi % kHuge == 0 || locked.hi == end.hi) << std::hex << locked.hi;
        // Widened by less than 2 MiB on each side.
        EXPECT_LT(row_lo - locked.lo, kHuge);
        EXPECT_LT(locked.hi - row_hi, kHuge);
    }
    ::close(fd);
    std::remove(path.c_str());
}
