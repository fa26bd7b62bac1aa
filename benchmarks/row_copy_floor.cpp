// row_copy_floor: a bare copy loop for a global shuffle of a file's rows, one copy a sample and
// no loader at all: each rank copies its share of a shuffled epoch's rows into a ring of
// `prefetch` batches, either with memcpy from the file's mapping (what a staged epoch does: the
// memory tier maps the same cached pages) or with pread (what an unstaged epoch does). No
// planning, no agreement, no thread hand-off, no report: a reference rate (the "copy floor";
// not a strict lower bound, runs differ by ±15 %) for `mpistage stage --stage memory` and
// `--stage none` on the same file, run by side_by_side.py as the rows "copy floor memcpy
// (global order, no loader)" and "copy floor pread (...)" (benchmarks/README.md, "Copy floor").
//
//   mpirun -np W build/benchmarks/row_copy_floor FILE N BATCH PREFETCH EPOCHS memcpy|pread
//          OFFSET:ROW_BYTES [OFFSET:ROW_BYTES ...]
//
// Each OFFSET:ROW_BYTES is one field stored row after row from byte OFFSET of FILE (an HDF5
// contiguous dataset: h5py's `dataset.id.get_offset()`); a sample's row of each field is copied
// to its slot of the current batch. The epoch's order is the library's own Permutation of
// [0, N) with a per-epoch key, dealt round robin to the ranks; a batch's rows are copied in
// file order. The file is mapped
// (MAP_SHARED), advised huge pages and populated (MADV_POPULATE_READ) before the first epoch,
// as the memory tier does, and loaded once by a touch pass, so neither method reads storage.
// Prints one JSON line on rank 0: {"method", "epoch_seconds": [...]} where each epoch's time is
// the slowest rank's, between two barriers. Collective over MPI_COMM_WORLD.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif

namespace {

struct Field {
    std::uint64_t offset = 0;
    std::uint64_t row_bytes = 0;
};

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "row_copy_floor: %s\n", what.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
    std::abort();
}

void read_fully(int fd, char* dst, std::uint64_t bytes, std::uint64_t offset) {
    std::uint64_t done = 0;
    while (done < bytes) {
        const ssize_t n = ::pread(fd, dst + done, bytes - done, static_cast<off_t>(offset + done));
        if (n <= 0)
            fail("pread failed or hit the end of the file at offset " +
                 std::to_string(offset + done));
        done += static_cast<std::uint64_t>(n);
    }
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    {
        const mpistage::Communicator comm(MPI_COMM_WORLD);
        if (argc < 8) {
            fail(std::string("usage: ") + argv[0] +
                 " FILE N BATCH PREFETCH EPOCHS memcpy|pread OFFSET:ROW_BYTES...");
        }
        const std::string path = argv[1];
        const std::uint64_t n = std::strtoull(argv[2], nullptr, 10);
        const std::uint64_t batch = std::strtoull(argv[3], nullptr, 10);
        const std::uint64_t prefetch = std::strtoull(argv[4], nullptr, 10);
        const int epochs = std::atoi(argv[5]);
        const std::string method = argv[6];
        if (method != "memcpy" && method != "pread") fail("unknown method '" + method + "'");
        if (n == 0 || batch == 0 || prefetch == 0 || epochs < 1)
            fail("N, BATCH, PREFETCH, EPOCHS > 0");
        std::vector<Field> fields;
        std::uint64_t sample_bytes = 0;
        for (int i = 7; i < argc; ++i) {
            const std::string s = argv[i];
            const auto colon = s.find(':');
            if (colon == std::string::npos) fail("field '" + s + "' is not OFFSET:ROW_BYTES");
            fields.push_back({std::strtoull(s.substr(0, colon).c_str(), nullptr, 10),
                              std::strtoull(s.substr(colon + 1).c_str(), nullptr, 10)});
            sample_bytes += fields.back().row_bytes;
        }

        const int fd = ::open(path.c_str(), O_RDONLY);
        if (fd < 0) fail("cannot open " + path);
        struct stat st {};
        ::fstat(fd, &st);
        const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
        for (const Field& f : fields) {
            if (f.offset + n * f.row_bytes > file_bytes)
                fail("a field runs past the end of " + path);
        }
        auto* map = static_cast<char*>(::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0));
        if (map == MAP_FAILED) fail("cannot map " + path);
        ::madvise(map, file_bytes, MADV_HUGEPAGE);
        ::madvise(map, file_bytes, MADV_POPULATE_READ);
        volatile char touched = 0;  // the touch pass: every page loaded once
        for (std::uint64_t at = 0; at < file_bytes; at += 4096) touched = map[at];
        (void)touched;

        // The ring: PREFETCH batches of BATCH samples, field-major within a batch as a
        // loader's batch is (one tensor per field).
        std::vector<char> ring(prefetch * batch * sample_bytes);
        std::memset(ring.data(), 1, ring.size());
        std::vector<std::uint64_t> field_base(fields.size());
        for (std::size_t f = 0, at = 0; f < fields.size(); ++f) {
            field_base[f] = at;
            at += batch * fields[f].row_bytes;
        }

        std::vector<double> seconds;
        for (int e = 0; e < epochs; ++e) {
            const mpistage::Permutation order(
                n, 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(e));
            comm.barrier();
            const auto t0 = std::chrono::steady_clock::now();
            // A batch's rows are copied in file order (each to its own slot), as the loader
            // reads a step's samples sorted by offset.
            std::vector<std::pair<std::uint64_t, std::uint64_t>> step;  // (id, slot)
            std::uint64_t k = 0;  // this rank's batches so far
            const auto copy_step = [&] {
                std::sort(step.begin(), step.end());
                char* slot_batch = ring.data() + (k % prefetch) * batch * sample_bytes;
                for (const auto& [id, slot] : step) {
                    for (std::size_t f = 0; f < fields.size(); ++f) {
                        const std::uint64_t row = fields[f].row_bytes;
                        char* dst = slot_batch + field_base[f] + slot * row;
                        const std::uint64_t at = fields[f].offset + id * row;
                        if (method == "memcpy") {
                            std::memcpy(dst, map + at, row);
                        } else {
                            read_fully(fd, dst, row, at);
                        }
                    }
                }
                step.clear();
                ++k;
            };
            for (std::uint64_t i = static_cast<std::uint64_t>(comm.rank()); i < n;
                 i += static_cast<std::uint64_t>(comm.size())) {
                step.emplace_back(order(i), step.size());
                if (step.size() == batch) copy_step();
            }
            if (!step.empty()) copy_step();
            const double mine =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const std::uint64_t slowest_ns =
                comm.allreduce_max(static_cast<std::uint64_t>(mine * 1e9));
            seconds.push_back(static_cast<double>(slowest_ns) * 1e-9);
        }
        if (comm.rank() == 0) {
            std::printf("{\"method\": \"%s\", \"epoch_seconds\": [", method.c_str());
            for (std::size_t i = 0; i < seconds.size(); ++i) {
                std::printf("%s%.6f", i ? ", " : "", seconds[i]);
            }
            std::printf("]}\n");
        }
        ::munmap(map, file_bytes);
        ::close(fd);
    }
    MPI_Finalize();
    return 0;
}
