// TFRecord benchmark (issue 3, acceptance 4). Measured side by side in one run, medians of 5
// runs after a warm-up (DESIGN.md §5):
//  1. index-free splitting (TfRecordSource open: every rank scans its cut, agreement,
//     descriptor exchange) versus a full sequential header scan of the same file on one rank,
//     in records/s (per rank and aggregate) on a generated file of >= 1 million small records;
//  2. CRC32C throughput in GB/s: ISA-L (crc32c) versus a table-driven and a bitwise reference.
// Usage: mpirun -np W bench_tfrecord [num_records (default 1048576)] [path]
// With more ranks than cores, the timings are not meaningful (report correctness only).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "mpistage/comm.hpp"
#include "sources/tfrecord/crc32c.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/framing.hpp"

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
        run_agreed(comm, [&] {
            if (comm.rank() != 0) return;
            std::mt19937_64 rng(42);
            std::vector<std::uint8_t> bytes;
            bytes.reserve(n * 120);
            std::vector<std::uint8_t> payload;
            for (std::uint64_t i = 0; i < n; ++i) {
                payload.resize(16 + rng() % 176);  // token-like small variable records
                for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
                tfrecord::append_record(bytes, payload.data(), payload.size());
            }
            std::ofstream out(path, std::ios::binary | std::ios::trunc);
            out.write(reinterpret_cast<const char*>(bytes.data()),
                      static_cast<std::streamsize>(bytes.size()));
            if (!out) throw IoError("bench: cannot write " + path);
        });
        comm.barrier();

        // 1a. Index-free split (the real collective open).
        std::uint64_t my_records = 0;
        std::uint64_t total_records = 0;
        std::vector<double> split_t;
        for (int i = 0; i <= runs; ++i) {
            comm.barrier();
            const auto t0 = Clock::now();
            TfRecordSource src(comm, {path});
            const double t = seconds_since(t0);
            my_records = src.records_in_cut(comm.rank(), comm.size());
            total_records = src.num_samples();
            src.close();
            if (i > 0)
                split_t.push_back(comm.allreduce_max(static_cast<std::uint64_t>(t * 1e9)) / 1e9);
        }
        const double split_s = median(split_t);

        // 1b. The scan alone (pread, same window size): every rank scans its cut; then rank 0
        // alone scans the whole file sequentially.
        const int fd = ::open(path.c_str(), O_RDONLY);
        if (fd < 0) throw IoError("bench: cannot open " + path);
        const off_t size = ::lseek(fd, 0, SEEK_END);
        tfrecord::ScanFile f;
        f.name = path;
        f.size_bytes = static_cast<std::uint64_t>(size);
        f.read = [fd](std::uint64_t off, void* dst, std::uint64_t len) {
            std::uint64_t done = 0;
            while (done < len) {
                const ssize_t got = ::pread(fd, static_cast<char*>(dst) + done, len - done,
                                            static_cast<off_t>(off + done));
                if (got <= 0) throw IoError("bench: short pread");
                done += static_cast<std::uint64_t>(got);
            }
        };
        std::vector<tfrecord::ScanFile> files{f};
        const std::uint64_t b = tfrecord::cut_begin(f.size_bytes, comm.rank(), comm.size());
        const std::uint64_t e = tfrecord::cut_begin(f.size_bytes, comm.rank() + 1, comm.size());
        std::vector<double> cut_t;
        std::uint64_t cut_records = 0;
        for (int i = 0; i <= runs; ++i) {
            comm.barrier();
            const auto t0 = Clock::now();
            cut_records = tfrecord::scan_cut(files, b, e, {}).records.size();
            const double t = seconds_since(t0);
            if (i > 0)
                cut_t.push_back(comm.allreduce_max(static_cast<std::uint64_t>(t * 1e9)) / 1e9);
        }
        const double cut_s = median(cut_t);
        const std::uint64_t cut_sum = comm.allreduce_sum(cut_records);
        double seq_s = 0;
        std::uint64_t seq_records = 0;
        if (comm.rank() == 0) {
            seq_s = median_time(runs, [&] {
                seq_records = tfrecord::walk_cut(files, 0, f.size_bytes, {}).records.size();
            });
        }
        ::close(fd);
        const auto per_rank = comm.allgather(my_records);

        // 2. CRC32C throughput.
        double isal_gbs = 0, table_gbs = 0, bitwise_gbs = 0;
        if (comm.rank() == 0) {
            std::vector<std::uint8_t> buf(std::size_t{64} << 20);
            std::mt19937_64 rng(1);
            for (auto& b : buf) b = static_cast<std::uint8_t>(rng());
            volatile std::uint32_t sink = 0;
            const double t_isal =
                median_time(runs, [&] { sink = sink ^ crc32c(buf.data(), buf.size()); });
            const double t_table =
                median_time(runs, [&] { sink = sink ^ crc32c_table(buf.data(), buf.size()); });
            const std::size_t small = std::size_t{8} << 20;
            const double t_bit =
                median_time(runs, [&] { sink = sink ^ crc32c_reference(buf.data(), small); });
            isal_gbs = static_cast<double>(buf.size()) / t_isal / 1e9;
            table_gbs = static_cast<double>(buf.size()) / t_table / 1e9;
            bitwise_gbs = static_cast<double>(small) / t_bit / 1e9;
            if (crc32c(buf.data(), small) != crc32c_reference(buf.data(), small)) {
                throw Error("bench: ISA-L and reference CRC32C disagree");
            }
        }

        if (comm.rank() == 0) {
            const double seq_rate = static_cast<double>(seq_records) / seq_s;
            const double split_rate = static_cast<double>(total_records) / split_s;
            std::printf("{\"records\": %llu, \"ranks\": %d, \"runs\": %d,\n",
                        static_cast<unsigned long long>(total_records), comm.size(), runs);
            std::printf(" \"sequential_scan_s\": %.4f, \"sequential_records_per_s\": %.0f,\n",
                        seq_s, seq_rate);
            std::printf(" \"split_open_s\": %.4f, \"split_records_per_s_aggregate\": %.0f,\n",
                        split_s, split_rate);
            std::printf(" \"split_records_per_s_per_rank\": [");
            for (std::size_t r = 0; r < per_rank.size(); ++r) {
                std::printf("%s%.0f", r ? ", " : "", static_cast<double>(per_rank[r]) / split_s);
            }
            std::printf("],\n \"split_open_vs_sequential_ratio\": %.2f,\n", split_rate / seq_rate);
            std::printf(
                " \"cut_scan_s\": %.4f, \"cut_scan_records_per_s_per_rank\": %.0f, "
                "\"cut_scan_vs_sequential_ratio\": %.2f,\n",
                cut_s, static_cast<double>(cut_sum) / cut_s / comm.size(),
                static_cast<double>(cut_sum) / cut_s / seq_rate);
            std::printf(
                " \"crc32c_isal_GBps\": %.2f, \"crc32c_table_GBps\": %.3f, "
                "\"crc32c_bitwise_GBps\": %.3f,\n",
                isal_gbs, table_gbs, bitwise_gbs);
            std::printf(" \"isal_vs_table\": %.1f, \"isal_vs_bitwise\": %.1f}\n",
                        isal_gbs / table_gbs, isal_gbs / bitwise_gbs);
            if (seq_records != total_records || cut_sum != total_records) {
                std::fprintf(stderr, "bench: split found %llu records, sequential %llu\n",
                             static_cast<unsigned long long>(total_records),
                             static_cast<unsigned long long>(seq_records));
                code = 1;
            }
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
