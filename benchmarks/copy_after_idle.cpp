// copy_after_idle: how fast a thread copies random rows out of a mapped file with loads
// (memcpy from the mapping, as the mapped tier does for small rows) and with pread from the
// same file's cached pages, back to back and after the thread was idle between steps (a
// trainer computing). The evidence behind the mapped tier's kKernelCopyRowBytes and
// kKernelCopyIdle (src/tier/mapped_rows.hpp; benchmarks/README.md, "Large rows after an idle
// reader" and "Warm epochs").
//
//   build/benchmarks/copy_after_idle FILE [STEPS] [ROUNDS] [no-advice]   (defaults 40 and 3)
//
// FILE is mapped read-only (MAP_SHARED), advised huge pages (MADV_HUGEPAGE, as the tier does;
// `no-advice` leaves it out), its pages mapped with madvise(MADV_POPULATE_READ) and loaded once
// (the touch pass), so neither method reads storage or pays a first load. For each
// row size and idle time, each round runs STEPS steps of 16 random rows (one "batch"): sleep the
// idle time, then copy the rows into one buffer, timing only the copy; loads and pread
// alternate step by step, after one warm-up round. Prints the median GB/s of each method over
// ROUNDS and their ratio. Run two at once (`A & B; wait`) for two ranks' worth of readers.
// Single-threaded, not MPI.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kRowsPerStep = 16;

struct Mapped {
    int fd = -1;
    const char* data = nullptr;
    std::size_t bytes = 0;
};

/// Copies row `r` of `row` bytes into `dst` with pread (`by_pread`) or memcpy.
void copy_row(const Mapped& m, std::size_t row, std::size_t r, char* dst, bool by_pread) {
    if (!by_pread) {
        std::memcpy(dst, m.data + r * row, row);
        return;
    }
    std::size_t done = 0;
    while (done < row) {
        const ssize_t n = ::pread(m.fd, dst + done, row - done, static_cast<off_t>(r * row + done));
        if (n <= 0) {
            std::perror("pread");
            std::exit(1);
        }
        done += static_cast<std::size_t>(n);
    }
}

/// GB/s of loads and of pread in one round: 2 x `steps` steps of kRowsPerStep random rows of
/// `row` bytes, each after sleeping `idle`, the methods alternating step by step so that both
/// meet the same state of the machine.
std::pair<double, double> round_rates(const Mapped& m, std::size_t row,
                                      std::chrono::microseconds idle, int steps,
                                      std::mt19937_64& rng, std::vector<char>& out) {
    const std::size_t rows = m.bytes / row;
    double seconds[2] = {0, 0};
    for (int s = 0; s < 2 * steps; ++s) {
        const bool by_pread = (s % 2) == 1;
        if (idle.count() > 0) std::this_thread::sleep_for(idle);
        const auto t0 = Clock::now();
        for (std::size_t k = 0; k < kRowsPerStep; ++k) {
            copy_row(m, row, rng() % rows, out.data() + k * row, by_pread);
        }
        seconds[by_pread ? 1 : 0] += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const double bytes = static_cast<double>(steps) * kRowsPerStep * row;
    return {bytes / seconds[0] / 1e9, bytes / seconds[1] / 1e9};
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s FILE [STEPS] [ROUNDS] [no-advice]\n", argv[0]);
        return 2;
    }
    const int steps = argc > 2 ? std::atoi(argv[2]) : 40;
    const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
    if (argc > 4 && std::string(argv[4]) != "no-advice") {
        std::fprintf(stderr, "%s: unknown option '%s' (no-advice)\n", argv[0], argv[4]);
        return 2;
    }
    const bool advise = argc <= 4;
    Mapped m;
    m.fd = ::open(argv[1], O_RDONLY);
    struct stat st {};
    if (m.fd < 0 || ::fstat(m.fd, &st) != 0 || st.st_size <= 0) {
        std::perror(argv[1]);
        return 1;
    }
    m.bytes = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, m.bytes, PROT_READ, MAP_SHARED, m.fd, 0);
    if (p == MAP_FAILED) {
        std::perror("mmap");
        return 1;
    }
    m.data = static_cast<const char*>(p);
    if (advise) (void)::madvise(p, m.bytes, MADV_HUGEPAGE);  // refused without THP: no matter
    (void)::madvise(p, m.bytes, MADV_POPULATE_READ);
    volatile char sink = 0;
    for (std::size_t i = 0; i < m.bytes; i += 4096) sink = sink + m.data[i];
    std::printf("%s: %.1f MB, %d steps of %zu rows, median of %d rounds, %s\n", argv[1],
                static_cast<double>(m.bytes) / 1e6, steps, kRowsPerStep, rounds,
                advise ? "MADV_HUGEPAGE" : "no advice");
    std::printf("%10s %10s %12s %12s %14s\n", "row bytes", "idle us", "loads GB/s", "pread GB/s",
                "pread / loads");
    std::mt19937_64 rng(7);
    for (const std::size_t row :
         {std::size_t{4096}, std::size_t{16384}, std::size_t{65536}, std::size_t{224 * 224 * 3}}) {
        if (row * kRowsPerStep > m.bytes) continue;
        std::vector<char> out(row * kRowsPerStep);
        for (const int idle_us : {0, 100, 1000, 2000, 5000, 10000, 25750}) {
            const std::chrono::microseconds idle(idle_us);
            std::vector<double> loads, preads;
            (void)round_rates(m, row, idle, steps, rng, out);  // warm-up, not counted
            for (int r = 0; r < rounds; ++r) {
                const auto rates = round_rates(m, row, idle, steps, rng, out);
                loads.push_back(rates.first);
                preads.push_back(rates.second);
            }
            const double l = median(loads), pr = median(preads);
            std::printf("%10zu %10d %12.2f %12.2f %14.2f\n", row, idle_us, l, pr, pr / l);
        }
    }
    ::munmap(p, m.bytes);
    ::close(m.fd);
    return 0;
}
