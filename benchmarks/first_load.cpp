// first_load: what a process's first load of each page of a mapped file costs after
// MADV_POPULATE_READ mapped the page, against a second load: the cost the memory tier's touch
// pass takes off the epochs (benchmarks/README.md, "Touch pass").
//
//   build/benchmarks/first_load FILE [ROUNDS] [no-advice]     (default 3 rounds)
//
// Each round maps FILE read-only (MAP_SHARED, as the mapped tier does), advises huge pages
// (MADV_HUGEPAGE, as the tier does), maps its pages with one madvise(MADV_POPULATE_READ)
// (reading from the file what is not cached), loads one byte per 4 KiB page, loads again, and
// unmaps. `no-advice` leaves out MADV_HUGEPAGE (the tier before it advised). Prints
// microseconds per page of each step, the minor page faults of each (getrusage) and how much
// of the process's file mappings the kernel mapped 2 MiB at a time (FilePmdMapped of
// /proc/self/smaps_rollup over the file's size; the shared libraries add next to nothing):
// a share of the file's page cache held in 2 MiB folios, mapped whole. Single-threaded, not
// MPI.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

namespace {

constexpr std::size_t kPage = 4096;

long minor_faults() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

struct Step {
    double seconds;
    long faults;
};

template <class F>
Step timed(F&& f) {
    const long f0 = minor_faults();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return {s, minor_faults() - f0};
}

/// FilePmdMapped of this process in KiB (0 where the kernel does not report it).
long pmd_mapped_kib() {
    std::ifstream in("/proc/self/smaps_rollup");
    std::string key;
    long kib = 0;
    while (in >> key) {
        if (key == "FilePmdMapped:" && (in >> kib)) return kib;
    }
    return 0;
}

unsigned load_pass(const volatile unsigned char* p, std::size_t bytes) {
    unsigned sink = 0;
    for (std::size_t i = 0; i < bytes; i += kPage) sink ^= p[i];
    return sink;
}

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
    const bool advise = argc <= 3 || std::string(argv[3]) != "no-advice";
    if (argc < 2 || argc > 4 || rounds <= 0 || (argc == 4 && advise)) {
        std::fprintf(stderr, "usage: first_load FILE [ROUNDS > 0] [no-advice]\n");
        return 2;
    }
    const int fd = ::open(argv[1], O_RDONLY);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size <= 0) {
        std::perror(argv[1]);
        return 1;
    }
    const auto bytes = static_cast<std::size_t>(st.st_size);
    const double pages = static_cast<double>((bytes + kPage - 1) / kPage);
    unsigned sink = 0;
    for (int r = 0; r < rounds; ++r) {
        void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            std::perror("first_load: mmap");
            return 1;
        }
        const auto* p = static_cast<const volatile unsigned char*>(m);
        if (advise) (void)::madvise(m, bytes, MADV_HUGEPAGE);
        const Step populate = timed([&] {
            if (::madvise(m, bytes, MADV_POPULATE_READ) != 0) std::perror("first_load: madvise");
        });
        const Step first = timed([&] { sink ^= load_pass(p, bytes); });
        const Step again = timed([&] { sink ^= load_pass(p, bytes); });
        const double pmd_share = static_cast<double>(pmd_mapped_kib()) * 1024.0 / bytes;
        ::munmap(m, bytes);
        std::printf(
            "%.0f pages  populate %.3f us/page (%ld faults)  first load %.3f us/page (%ld faults)  "
            "again %.3f us/page  2 MiB-mapped %.0f %%\n",
            pages, populate.seconds * 1e6 / pages, populate.faults, first.seconds * 1e6 / pages,
            first.faults, again.seconds * 1e6 / pages, 100.0 * pmd_share);
    }
    return sink == 256 ? 3 : 0;  // never: keeps the loads
}
