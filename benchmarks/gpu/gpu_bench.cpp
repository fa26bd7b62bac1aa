// GPU benchmark of the real loader (benchmarks/gpu/run.sh; docs/gpu.md): batches come from
// `mpistage::Loader` (its plan, prefetch ring, I/O threads and pinned slots), which delivers
// them on the device (its stream-ordered stager), exactly as a trainer's batches arrive.
// Measures pinned versus pageable cudaMemcpy for 1-256 MiB, the staged throughput per batch
// size with and without an emulated compute step per batch (overlap), and checks the device
// bytes of every batch against the samples' pattern. Without a CUDA runtime or device it runs
// the same loop on the CPU path (no copies).
// Usage: gpu_bench [RESULTS_FILE] (one MPI rank is enough; mpirun is optional)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compute.hpp"
#include "device/cuda_api.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"

using namespace mpistage;
using namespace mpistage::detail;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::uint64_t kSampleBytes = 256 * 1024;

// Prints to stdout and, when given, to the results file; on rank 0 only (under mpirun every
// rank measures, and rank 0's numbers stand for all).
struct Report {
    std::FILE* file = nullptr;
    bool quiet = false;
    void text(const std::string& s) {
        if (quiet) return;
        std::printf("%s\n", s.c_str());
        std::fflush(stdout);
        if (file) std::fprintf(file, "%s\n", s.c_str());
    }
    void line(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        text(buf);
    }
};

/// Byte `i` of sample `id` for run `seed` (splitmix64 of the 8-byte word).
std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t id, std::uint64_t i) {
    std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (id * 0x100000001B3ull + i / 8 + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<std::uint8_t>(z >> (8 * (i % 8)));
}

/// N samples of one uint8 field [kSampleBytes]. `full`: every byte is the pattern (the byte
/// check); otherwise a read stamps the id into the first 8 bytes of each sample only, so the
/// throughput runs measure the loader and its copies rather than the filling of bytes.
class PatternSource final : public Source {
public:
    PatternSource(std::uint64_t n, std::uint64_t seed, bool full)
        : n_(n), seed_(seed), full_(full) {
        fields_.push_back(
            {"x", DType::uint8, {static_cast<std::int64_t>(kSampleBytes)}, kSampleBytes, false});
    }
    const std::vector<FieldInfo>& fields() const override { return fields_; }
    std::uint64_t num_samples() const override { return n_; }
    std::uint64_t records_in_cut(int rank, int world_size) const override {
        return fixed_records_in_cut(n_, kSampleBytes, rank, world_size);
    }
    std::string fingerprint() const override {
        return "gpu_bench:" + std::to_string(n_) + ":" + std::to_string(seed_);
    }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        for (std::size_t k = 0; k < count; ++k) {
            auto* out = reinterpret_cast<std::uint8_t*>(sink.fixed(0, k));
            if (!full_) {
                std::memcpy(out, &ids[k], sizeof ids[k]);
                continue;
            }
            for (std::uint64_t i = 0; i < kSampleBytes; ++i)
                out[i] = pattern_byte(seed_, ids[k], i);
        }
    }

private:
    std::uint64_t n_;
    std::uint64_t seed_;
    bool full_;
    std::vector<FieldInfo> fields_;
};

/// The bytes of the batch's field (read back from the device after the batch's copy, which
/// the legacy default stream waits for, or the host memory itself).
std::vector<std::uint8_t> field_bytes(const HostBatch& b) {
    const HostField& f = b.fields()[0];
    std::vector<std::uint8_t> out(static_cast<std::size_t>(f.size_bytes));
    if (b.device() < 0) {
        std::memcpy(out.data(), f.data, out.size());
        return out;
    }
    DeviceGuard guard(b.device());
    CudaStream s = make_stream();
    CudaEvent after_copy = make_event();
    record_on(after_copy, nullptr);  // the loader's consumer stream: the legacy default stream
    stream_wait(s, after_copy);
    copy_to_host_async(out.data(), f.device_data, out.size(), s);
    if (!synchronize_noexcept(s)) throw CudaError("gpu_bench: reading a batch back failed");
    return out;
}

/// Valid samples of a batch whose bytes differ from the pattern.
std::uint64_t mismatches(const HostBatch& b, std::uint64_t seed) {
    const std::vector<std::uint8_t> data = field_bytes(b);
    std::uint64_t bad = 0;
    for (std::size_t j = 0; j < b.size(); ++j) {
        if (!b.valid()[j]) continue;
        const auto id = static_cast<std::uint64_t>(b.index()[j]);
        for (std::uint64_t i = 0; i < kSampleBytes; ++i) {
            if (data[j * kSampleBytes + i] != pattern_byte(seed, id, i)) {
                ++bad;
                break;
            }
        }
    }
    return bad;
}

/// About `microseconds` of work per batch: the emulated kernel (compute.hpp) on a CUDA device,
/// a sleep on the consumer thread on the CPU path (the loader's I/O threads keep reading).
void compute_step(bool cuda, double microseconds) {
    if (cuda) {
        launch_compute(microseconds);
    } else {
        std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(microseconds));
    }
}

/// Waits for the work of `compute_step` (only the device's is asynchronous).
void compute_wait(bool cuda) {
    if (cuda) wait_compute();
}

struct RunResult {
    double wall_seconds = 0;
    StagingStats staging;
    std::uint64_t batches = 0;
    std::uint64_t bad_samples = 0;
    std::string device;
};

/// One epoch of `steps` batches of `batch_bytes` through the loader (prefetch 4, 2 I/O
/// threads, pinned slots for a CUDA device), which delivers them on the device: each batch's
/// copy is submitted up to `prefetch` batches ahead on the loader's stream and the consumer's
/// (legacy default) stream waits on it. With `compute_us`, the consumer enqueues that much
/// work per batch on that stream, as a training step would; with `full`, every batch's bytes
/// are compared with the pattern.
RunResult run_loader(const Communicator& comm, std::size_t batch_bytes, std::uint64_t steps,
                     double compute_us, bool full, std::uint64_t seed) {
    const std::uint64_t b = std::max<std::uint64_t>(batch_bytes / kSampleBytes, 1);
    PatternSource source(b * steps * static_cast<std::uint64_t>(comm.size()), seed, full);
    LoaderOptions o;
    o.plan.batch_size = b;
    o.pipeline.prefetch = 4;
    o.pipeline.io_threads = 2;
    o.delivery.log_device_fallback = false;
    Loader loader(comm, source, o);
    const bool cuda = loader.stats().device.cuda;
    RunResult out;
    out.device = loader.stats().device.name();
    const auto t0 = Clock::now();
    for (const HostBatch& batch : loader.epoch(0)) {
        if (compute_us > 0) compute_step(cuda, compute_us);
        if (full) out.bad_samples += mismatches(batch, seed);
        ++out.batches;
    }
    compute_wait(cuda);
    out.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    out.staging = loader.stats().staging;
    return out;
}

/// Seconds of `steps` compute steps alone.
double compute_alone(bool cuda, std::uint64_t steps, double compute_us) {
    const auto t0 = Clock::now();
    for (std::uint64_t i = 0; i < steps; ++i) compute_step(cuda, compute_us);
    compute_wait(cuda);
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Throughput per batch size, without and with compute; true when, on a CUDA device, the
/// stager's H2D rate reaches 85 % of the pinned peak for every batch of at least 8 MiB.
bool loader_table(Report& r, const Communicator& comm, bool cuda, double peak) {
    r.text("");
    r.line(
        "the loader (prefetch 4, 2 I/O threads, pinned slots on CUDA) delivering on the device "
        "(its own stream, copies up to 4 batches ahead); compute = %s, as long as one batch's copy "
        "(or 1 ms on the CPU path):",
        cuda ? compute_kind() : "a sleep on the consumer thread (the CPU path)");
    r.line("%9s %6s %9s %8s %11s %10s %10s %10s %10s %9s", "batch_MiB", "steps", "H2D_GB/s",
           "of_peak", "staged_GB/s", "alone_s", "compute_s", "both_s", "both_GB/s", "overlap");
    compute_step(cuda, 1);  // calibrates the spin kernel outside the timings
    compute_wait(cuda);
    bool ok = true;
    const std::vector<std::size_t> sizes =
        cuda ? std::vector<std::size_t>{8, 32, 128} : std::vector<std::size_t>{1, 8};
    for (std::size_t mib : sizes) {
        const std::size_t n = mib * kMiB;
        const std::uint64_t steps =
            cuda ? std::clamp<std::uint64_t>((4096 * kMiB) / n, 16, 256) : 16;
        run_loader(comm, n, 4, 0, false, 1);  // warm-up: pinning, pool, first launches
        const RunResult alone = run_loader(comm, n, steps, 0, false, 1);
        const double copy_us =
            cuda ? alone.staging.copy_seconds / static_cast<double>(steps) * 1e6 : 1000.0;
        const double compute_s = compute_alone(cuda, steps, copy_us);
        const RunResult both = run_loader(comm, n, steps, copy_us, false, 1);
        const double bytes = static_cast<double>(n) * static_cast<double>(steps);
        const double h2d = alone.staging.h2d_gbps();
        // Overlap: the share of the shorter phase hidden under the other (1 = fully hidden).
        const double hidden = alone.wall_seconds + compute_s - both.wall_seconds;
        const double overlap = hidden / std::min(alone.wall_seconds, compute_s);
        if (cuda) ok = ok && h2d >= 0.85 * peak;
        r.line("%9zu %6llu %9.2f %7.1f%% %11.2f %10.3f %10.3f %10.3f %10.2f %8.0f%%", mib,
               static_cast<unsigned long long>(steps), h2d, peak > 0 ? 100 * h2d / peak : 0.0,
               bytes / alone.wall_seconds / 1e9, alone.wall_seconds, compute_s, both.wall_seconds,
               bytes / both.wall_seconds / 1e9, 100 * overlap);
    }
    if (cuda) {
        r.line("pinned H2D >= 85%% of the pinned cudaMemcpy peak for batches >= 8 MiB: %s",
               ok ? "yes" : "NO");
    }
    return ok;
}

/// Every staged batch's bytes equal the samples' pattern (fresh seed, 24 batches of 8 MiB per
/// rank). Collective: rank 0 draws the seed (every rank's source must hash the same), and the
/// result is every rank's.
bool verify(Report& r, const Communicator& comm) {
    const std::uint64_t drawn =
        (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
    const std::uint64_t seed = std::stoull(comm.broadcast(std::to_string(drawn), 0));
    const RunResult run = run_loader(comm, 8 * kMiB, 24, 0, true, seed);
    const std::vector<std::uint64_t> bad =
        comm.allreduce_sum({run.bad_samples, run.batches == 24 ? 0u : 1u});
    r.line("byte check of %llu staged batches per rank on %s, %d rank(s) (seed %llu): %s",
           static_cast<unsigned long long>(run.batches), run.device.c_str(), comm.size(),
           static_cast<unsigned long long>(seed), bad[0] == 0 && bad[1] == 0 ? "OK" : "FAILED");
    return bad[0] == 0 && bad[1] == 0;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    Report r;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    r.quiet = rank != 0;
    if (argc > 1 && rank == 0) r.file = std::fopen(argv[1], "w");
    int rc = 1;
    try {
        const Communicator comm(MPI_COMM_WORLD);
        comm.split_node();  // collective: the node rank of the device fallback
        const DeviceChoice dev = choose_device(parse_device("auto"), comm.node_rank());
        if (dev.cuda) {
            DeviceGuard guard(dev.index);
            r.line("device %s (CUDA), %d rank(s)", dev.name().c_str(), comm.size());
        } else {
            r.line("device cpu: %s", dev.reason.c_str());
        }
        double peak = 0;
        if (dev.cuda) {
            DeviceGuard guard(dev.index);
            peak = memcpy_sweep([&](const std::string& s) { r.text(s); });
            raw_overlap(8 * kMiB, 256, [&](const std::string& s) { r.text(s); });
        }
        const bool fast = loader_table(r, comm, dev.cuda, peak);
        const bool same = verify(r, comm);
        rc = same ? (fast ? 0 : 3) : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpu_bench: rank %d: %s\n", rank, e.what());
    }
    if (r.file) std::fclose(r.file);
    MPI_Finalize();
    return rc;
}
