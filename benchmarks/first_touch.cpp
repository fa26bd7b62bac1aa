// first_touch: what the first store to each page of fresh memory costs on this machine, the
// cost that dominates the memory tier's staging on the development VM (benchmarks/README.md,
// "Issue 21 on the idle machine").
//
//   build/benchmarks/first_touch [MIB] [ROUNDS] [PAUSE_S]     (defaults 1024, 2, 5)
//
// Each round maps MIB MiB of fresh memory twice, private anonymous (malloc's large blocks) and
// shared anonymous (shmem, as an MPI shared-memory window), stores one byte per 4 KiB page,
// stores again (pages already mapped), and unmaps; then sleeps PAUSE_S seconds, so memory a
// virtual machine's balloon reports free in between is fresh again. Prints microseconds per
// page for the first and the second pass. Single-threaded, not MPI.
#include <sys/mman.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

constexpr std::size_t kPage = 4096;

double touch(volatile unsigned char* p, std::size_t bytes, unsigned char value) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < bytes; i += kPage) p[i] = value;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool round_trip(const char* what, int flags, std::size_t bytes) {
    void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (m == MAP_FAILED) {
        std::perror("first_touch: mmap");
        return false;
    }
    auto* p = static_cast<volatile unsigned char*>(m);
    const double first = touch(p, bytes, 1);
    const double again = touch(p, bytes, 2);
    ::munmap(m, bytes);
    const double pages = static_cast<double>(bytes / kPage);
    std::printf(
        "%-18s %8.0f MiB  first store %7.3f s = %6.2f us/page   again %6.3f s = %5.3f us/page\n",
        what, static_cast<double>(bytes) / (1 << 20), first, first * 1e6 / pages, again,
        again * 1e6 / pages);
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 2;
    const int pause_s = argc > 3 ? std::atoi(argv[3]) : 5;
    if (mib == 0 || rounds <= 0 || pause_s < 0) {
        std::fprintf(stderr, "usage: first_touch [MIB > 0] [ROUNDS > 0] [PAUSE_S >= 0]\n");
        return 2;
    }
    const std::size_t bytes = mib << 20;
    for (int r = 0; r < rounds; ++r) {
        if (r > 0) std::this_thread::sleep_for(std::chrono::seconds(pause_s));
        if (!round_trip("private anonymous", MAP_PRIVATE | MAP_ANONYMOUS, bytes) ||
            !round_trip("shared anonymous", MAP_SHARED | MAP_ANONYMOUS, bytes))
            return 1;
    }
    return 0;
}
