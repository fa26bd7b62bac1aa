// Shared by the two consumer projects of the install test: writes a small IDX pair, stages one
// epoch through the installed package and checks that every sample arrived exactly once with
// its own bytes. Only public headers of the installed package are used.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "mpistage/mpistage.hpp"

namespace consumer {

constexpr std::uint32_t kSamples = 103;  // not a multiple of ranks × batch: padding is exercised
constexpr std::uint32_t kRows = 2;
constexpr std::uint32_t kCols = 3;

inline unsigned char pixel(std::uint64_t sample, std::uint64_t j) {
    return static_cast<unsigned char>((sample * 7 + j * 3 + 1) & 0xff);
}

inline void put_be32(std::ofstream& out, std::uint32_t v) {
    const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
    out.write(b, 4);
}

/// Rank 0 writes `<dir>/images.idx` (uint8 [N][2][3]) and `<dir>/labels.idx` (uint8 [N]).
inline void write_idx_pair(const std::string& dir) {
    std::ofstream images(dir + "/images.idx", std::ios::binary);
    images.write("\0\0\x08\x03", 4);
    put_be32(images, kSamples);
    put_be32(images, kRows);
    put_be32(images, kCols);
    for (std::uint64_t i = 0; i < kSamples; ++i) {
        for (std::uint64_t j = 0; j < kRows * kCols; ++j)
            images.put(static_cast<char>(pixel(i, j)));
    }
    std::ofstream labels(dir + "/labels.idx", std::ios::binary);
    labels.write("\0\0\x08\x01", 4);
    put_be32(labels, kSamples);
    for (std::uint64_t i = 0; i < kSamples; ++i) labels.put(static_cast<char>(i % 251));
    if (!images || !labels) throw mpistage::IoError("consumer: cannot write IDX files in " + dir);
}

/// Counts of each sample id seen on this rank; bad = slots whose bytes are not the sample's.
struct Seen {
    std::vector<std::uint64_t> count = std::vector<std::uint64_t>(kSamples, 0);
    std::uint64_t bad = 0;
};

/// Checks one slot's bytes against the sample id it claims to hold.
inline void check_slot(Seen& seen, std::int64_t id, const unsigned char* image, unsigned label) {
    if (id < 0 || id >= static_cast<std::int64_t>(kSamples)) {
        ++seen.bad;
        return;
    }
    ++seen.count[static_cast<std::size_t>(id)];
    for (std::uint64_t j = 0; j < kRows * kCols; ++j) {
        if (image[j] != pixel(static_cast<std::uint64_t>(id), j)) ++seen.bad;
    }
    if (label != static_cast<unsigned>(id % 251)) ++seen.bad;
}

/// Collective: sums the counts over ranks; returns 0 when every sample came exactly once.
inline int report(MPI_Comm comm, Seen& seen, const char* who) {
    MPI_Allreduce(MPI_IN_PLACE, seen.count.data(), kSamples, MPI_UINT64_T, MPI_SUM, comm);
    MPI_Allreduce(MPI_IN_PLACE, &seen.bad, 1, MPI_UINT64_T, MPI_SUM, comm);
    std::uint64_t wrong = 0;
    for (std::uint64_t c : seen.count) wrong += (c != 1);
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0) {
        std::printf("%s: %u samples, %llu not seen exactly once, %llu wrong slots\n", who, kSamples,
                    static_cast<unsigned long long>(wrong),
                    static_cast<unsigned long long>(seen.bad));
    }
    return (wrong == 0 && seen.bad == 0) ? 0 : 1;
}

/// Collective: the source over the IDX pair written by rank 0 into `dir`.
inline mpistage::RawSource open_source(const mpistage::Communicator& comm, const std::string& dir) {
    if (comm.rank() == 0) write_idx_pair(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    return mpistage::RawSource(comm, {mpistage::parse_idx_header(dir + "/images.idx", "images"),
                                      mpistage::parse_idx_header(dir + "/labels.idx", "labels")});
}

/// Options of the staged epoch: batches of 8, padding masked, no pinned memory (no GPU needed).
inline mpistage::LoaderOptions loader_options() {
    mpistage::LoaderOptions options;
    options.plan.batch_size = 8;
    options.plan.shuffle = mpistage::Shuffle::local;
    options.plan.remainder = mpistage::Remainder::mask;
    options.delivery.pin_memory = false;
    return options;
}

/// The whole consumer: MPI setup, the IDX pair in WORK_DIR (argv[1]), one staged epoch handed
/// batch by batch to `per_batch(batch, seen)`, the exactly-once report. Returns the exit code.
template <class PerBatch>
int run(int argc, char** argv, const char* who, PerBatch per_batch) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rc = 0;
    try {
        if (argc != 2) throw mpistage::ConfigError("usage: x WORK_DIR");
        mpistage::Communicator comm(MPI_COMM_WORLD);
        mpistage::RawSource source = open_source(comm, argv[1]);
        mpistage::Loader loader(comm, source, loader_options());
        Seen seen;
        for (const mpistage::HostBatch& batch : loader.epoch(0)) per_batch(batch, seen);
        rc = report(MPI_COMM_WORLD, seen, who);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", who, e.what());
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}

}  // namespace consumer
