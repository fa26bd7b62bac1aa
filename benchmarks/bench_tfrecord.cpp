// TFRecord benchmark (issue 3, acceptance 4). Measured side by side in one run, medians of 5
// runs after a warm-up (DESIGN.md §5):
//  1. index-free splitting (TfRecordSource open: every rank scans its cut, agreement,
//     descriptor exchange) versus a full sequential header scan of the same file on one rank,
//     in records/s (per rank and aggregate) on a generated file of >= 1 million small records;
//  2. CRC32C throughput in GB/s: ISA-L (crc32c) versus a table-driven and a bitwise reference.
// Usage: mpirun -np W bench_tfrecord [num_records (default 1048576)] [path]
// With more ranks than cores, the timings are not meaningful (report correctness only).
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/crc32c.hpp"
#include "sources/tfrecord/framing.hpp"
#include "util/posix_file.hpp"

using namespace mpistage;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class Fn>
double median_time(int runs, Fn fn) {
    fn();  // warm-up
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) {
        const auto t0 = Clock::now();
        fn();
        t.push_back(seconds_since(t0));
    }
    return median(t);
}

struct Results {
    std::uint64_t total_records = 0;
    std::vector<std::uint64_t> per_rank;  // records in each rank's cut
    double split_s = 0;                   // median of the slowest rank's collective open
    double cut_s = 0;                     // median of the slowest rank's scan of its cut
    std::uint64_t cut_sum = 0;
    double seq_s = 0;                     // rank 0: sequential scan of the whole file
    std::uint64_t seq_records = 0;
    double isal_gbs = 0, table_gbs = 0, bitwise_gbs = 0;
};

// Collective: rank 0 writes n token-like small variable records to `path`.
void write_file(const Communicator& comm, const std::string& path, std::uint64_t n) {
    run_agreed(comm, [&] {
        if (comm.rank() != 0) return;
        std::mt19937_64 rng(42);
        std::vector<std::uint8_t> bytes;
        bytes.reserve(n * 120);
        std::vector<std::uint8_t> payload;
        for (std::uint64_t i = 0; i < n; ++i) {
            payload.resize(16 + rng() % 176);
            for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
            tfrecord::append_record(bytes, payload.data(), payload.size());
        }
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(bytes.data()),
                  static_cast<std::streamsize>(bytes.size()));
        if (!out) throw IoError("bench: cannot write " + path);
    });
    comm.barrier();
}

// Collective: times `fn` on every rank, `runs` times after a warm-up; the slowest rank counts.
template <class Fn>
double median_max_time(const Communicator& comm, int runs, Fn fn) {
    std::vector<double> t;
    for (int i = 0; i <= runs; ++i) {
        comm.barrier();
        const auto t0 = Clock::now();
        fn();
        const double s = seconds_since(t0);
        if (i > 0) t.push_back(comm.allreduce_max(static_cast<std::uint64_t>(s * 1e9)) / 1e9);
    }
    return median(t);
}

// 1a. The index-free split (the real collective open).
void bench_split(const Communicator& comm, const std::string& path, int runs, Results& r) {
    std::uint64_t mine = 0;
    r.split_s = median_max_time(comm, runs, [&] {
        TfRecordSource src(comm, {path});
        mine = src.records_in_cut(comm.rank(), comm.size());
        r.total_records = src.num_samples();
        src.close();
    });
    r.per_rank = comm.allgather(mine);
}

// 1b. The scan alone (pread, same window size): every rank scans its cut; then rank 0 alone
// scans the whole file sequentially.
void bench_scan(const Communicator& comm, const std::string& path, int runs, Results& r) {
    const detail::PosixFile file(path);
    tfrecord::ScanFile f;
    f.name = path;
    f.size_bytes = file.size_bytes();
    f.read = [&file](std::uint64_t off, void* dst, std::uint64_t len) {
        file.read_exact(static_cast<std::byte*>(dst), len, off, "bench");
    };
    std::vector<tfrecord::ScanFile> files{f};
    const std::uint64_t b = tfrecord::cut_begin(f.size_bytes, comm.rank(), comm.size());
    const std::uint64_t e = tfrecord::cut_begin(f.size_bytes, comm.rank() + 1, comm.size());
    std::uint64_t cut_records = 0;
    r.cut_s = median_max_time(comm, runs, [&] {
        cut_records = tfrecord::scan_cut(files, b, e, {}).records.size();
    });
    r.cut_sum = comm.allreduce_sum(cut_records);
    if (comm.rank() == 0) {
        r.seq_s = median_time(runs, [&] {
            r.seq_records = tfrecord::walk_cut(files, 0, f.size_bytes, {}).records.size();
        });
    }
}

// 2. CRC32C throughput (rank 0): ISA-L against the table and bitwise references.
void bench_crc(int runs, Results& r) {
    std::vector<std::uint8_t> buf(std::size_t{64} << 20);
    std::mt19937_64 rng(1);
    for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
    volatile std::uint32_t sink = 0;
    const double t_isal = median_time(runs, [&] { sink = sink ^ crc32c(buf.data(), buf.size()); });
    const double t_table =
        median_time(runs, [&] { sink = sink ^ crc32c_table(buf.data(), buf.size()); });
    const std::size_t small = std::size_t{8} << 20;
    const double t_bit =
        median_time(runs, [&] { sink = sink ^ crc32c_reference(buf.data(), small); });
    r.isal_gbs = static_cast<double>(buf.size()) / t_isal / 1e9;
    r.table_gbs = static_cast<double>(buf.size()) / t_table / 1e9;
    r.bitwise_gbs = static_cast<double>(small) / t_bit / 1e9;
    if (crc32c(buf.data(), small) != crc32c_reference(buf.data(), small)) {
        throw Error("bench: ISA-L and reference CRC32C disagree");
    }
}

// Rank 0: the results as one JSON object. Returns 1 when the scans disagree on the count.
int print_results(const Results& r, int ranks, int runs) {
    const double seq_rate = static_cast<double>(r.seq_records) / r.seq_s;
    const double split_rate = static_cast<double>(r.total_records) / r.split_s;
    std::printf("{\"records\": %llu, \"ranks\": %d, \"runs\": %d,\n",
                static_cast<unsigned long long>(r.total_records), ranks, runs);
    std::printf(" \"sequential_scan_s\": %.4f, \"sequential_records_per_s\": %.0f,\n", r.seq_s,
                seq_rate);
    std::printf(" \"split_open_s\": %.4f, \"split_records_per_s_aggregate\": %.0f,\n", r.split_s,
                split_rate);
    std::printf(" \"split_records_per_s_per_rank\": [");
    for (std::size_t i = 0; i < r.per_rank.size(); ++i) {
        std::printf("%s%.0f", i ? ", " : "", static_cast<double>(r.per_rank[i]) / r.split_s);
    }
    std::printf("],\n \"split_open_vs_sequential_ratio\": %.2f,\n", split_rate / seq_rate);
    std::printf(
        " \"cut_scan_s\": %.4f, \"cut_scan_records_per_s_per_rank\": %.0f, "
        "\"cut_scan_vs_sequential_ratio\": %.2f,\n",
        r.cut_s, static_cast<double>(r.cut_sum) / r.cut_s / ranks,
        static_cast<double>(r.cut_sum) / r.cut_s / seq_rate);
    std::printf(
        " \"crc32c_isal_GBps\": %.2f, \"crc32c_table_GBps\": %.3f, "
        "\"crc32c_bitwise_GBps\": %.3f,\n",
        r.isal_gbs, r.table_gbs, r.bitwise_gbs);
    std::printf(" \"isal_vs_table\": %.1f, \"isal_vs_bitwise\": %.1f}\n", r.isal_gbs / r.table_gbs,
                r.isal_gbs / r.bitwise_gbs);
    if (r.seq_records != r.total_records || r.cut_sum != r.total_records) {
        std::fprintf(stderr, "bench: split found %llu records, sequential %llu\n",
                     static_cast<unsigned long long>(r.total_records),
                     static_cast<unsigned long long>(r.seq_records));
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int code = 0;
    try {
        Communicator comm(MPI_COMM_WORLD);
        const std::uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (1u << 20);
        const std::string path = argc > 2 ? argv[2] : "/tmp/mpistage_bench_tfrecord.tfrecords";
        const int runs = 5;
        write_file(comm, path, n);
        Results r;
        bench_split(comm, path, runs, r);
        bench_scan(comm, path, runs, r);
        if (comm.rank() == 0) {
            bench_crc(runs, r);
            code = print_results(r, comm.size(), runs);
        }
        comm.barrier();
        if (comm.rank() == 0 && argc <= 2) std::remove(path.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_tfrecord: %s\n", e.what());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Finalize();
    return code;
}
