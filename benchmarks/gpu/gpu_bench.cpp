// GPU benchmark of the stage component (benchmarks/gpu/run.sh; docs/gpu.md): pinned versus
// pageable cudaMemcpy bandwidth for 1-256 MiB, the staging pipeline's throughput with and
// without an emulated compute step per batch (overlap), and a byte check of staged batches.
// No MPI, no HDF5. Usage: gpu_bench [RESULTS_FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute.hpp"
#include "stage/cuda_api.hpp"
#include "stage_test_util.hpp"

using namespace mpistage;
using namespace mpistage::detail;

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMiB = std::size_t{1} << 20;

// Prints to stdout and, when given, to the results file.
struct Report {
    std::FILE* file = nullptr;
    void line(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        std::vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        std::printf("%s\n", buf);
        std::fflush(stdout);
        if (file) std::fprintf(file, "%s\n", buf);
    }
};

void check(cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) {
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(rc));
    }
}

// GB/s of `reps` host → device copies of `n` bytes, timed with events on `s`.
double copy_gbps(void* dst, const void* src, std::size_t n, int reps, cudaStream_t s) {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s), "warm-up copy");
    check(cudaEventRecord(a, s), "cudaEventRecord");
    for (int i = 0; i < reps; ++i) {
        check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    }
    check(cudaEventRecord(b, s), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return static_cast<double>(n) * reps / (static_cast<double>(ms) / 1e3) / 1e9;
}

// Pinned versus pageable cudaMemcpy for 1..256 MiB; returns the pinned peak in GB/s.
double memcpy_sweep(Report& r) {
    const std::size_t max_bytes = 256 * kMiB;
    void* pinned = nullptr;
    void* device = nullptr;
    check(cudaHostAlloc(&pinned, max_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaMalloc(&device, max_bytes), "cudaMalloc");
    std::vector<unsigned char> pageable(max_bytes, 1);
    std::memset(pinned, 1, max_bytes);
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    r.line("cudaMemcpy host -> device (GB/s = 1e9 bytes/s, events):");
    r.line("%10s %14s %14s", "size_MiB", "pageable_GB/s", "pinned_GB/s");
    double peak = 0;
    for (std::size_t mib = 1; mib <= 256; mib *= 2) {
        const std::size_t n = mib * kMiB;
        const int reps = static_cast<int>(std::clamp<std::size_t>((2048 * kMiB) / n, 4, 64));
        const double pageable_gbps = copy_gbps(device, pageable.data(), n, reps, s);
        const double pinned_gbps = copy_gbps(device, pinned, n, reps, s);
        peak = std::max(peak, pinned_gbps);
        r.line("%10zu %14.2f %14.2f", mib, pageable_gbps, pinned_gbps);
    }
    r.line("pinned peak: %.2f GB/s", peak);
    cudaStreamDestroy(s);
    cudaFree(device);
    cudaFreeHost(pinned);
    return peak;
}

struct RingRun {
    double wall_seconds = 0;
    StagingStats stats;
};

// Stages `steps` batches of `batch_bytes` through the pipeline (3 pinned slots, depth 2); the
// slots are filled once and each step stamps 8 bytes, so this measures the stage hop, not a
// reader. With `compute_us`, the consumer enqueues that much work per batch on the default
// stream, as a training step would.
RingRun run_ring(const DeviceChoice& dev, std::size_t batch_bytes, std::uint64_t steps,
                 double compute_us) {
    PipelineOptions o = stage_test::pipeline_options(dev, 3, batch_bytes);
    StagePipeline p(o, steps, [](std::uint64_t step, std::byte* data, std::size_t capacity) {
        std::memcpy(data, &step, sizeof step);
        return capacity;
    });
    const auto t0 = Clock::now();
    PipelineBatch b;
    while (p.next(b)) {
        if (compute_us > 0) launch_compute(nullptr, compute_us);
    }
    b = PipelineBatch();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    RingRun out;
    out.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    out.stats = p.stats();
    return out;
}

// Seconds of `steps` compute steps alone.
double compute_alone(std::uint64_t steps, double compute_us) {
    const auto t0 = Clock::now();
    for (std::uint64_t i = 0; i < steps; ++i) launch_compute(nullptr, compute_us);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The ring's throughput per batch size, without and with compute; true when the stager's H2D
// rate reaches 85 % of the pinned peak for every batch of at least 8 MiB.
bool ring_table(Report& r, const DeviceChoice& dev, double peak) {
    r.line("");
    r.line(
        "staging pipeline (3 pinned slots, depth 2, one stream, an event per batch); "
        "compute = %s, as long as one batch's copy:",
        compute_kind());
    r.line("%9s %6s %9s %8s %11s %10s %10s %10s %10s %9s", "batch_MiB", "steps", "H2D_GB/s",
           "of_peak", "staged_GB/s", "copy_s", "compute_s", "both_s", "both_GB/s", "overlap");
    launch_compute(nullptr, 1);  // calibrates the spin kernel outside the timings
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    bool ok = true;
    for (std::size_t mib : {8, 32, 128}) {
        const std::size_t n = mib * kMiB;
        const std::uint64_t steps = std::clamp<std::uint64_t>((4096 * kMiB) / n, 16, 256);
        run_ring(dev, n, 4, 0);  // warm-up: pinning, pool, first launches
        const RingRun alone = run_ring(dev, n, steps, 0);
        const double copy_us = alone.stats.copy_seconds / steps * 1e6;
        const double compute_s = compute_alone(steps, copy_us);
        const RingRun both = run_ring(dev, n, steps, copy_us);
        const double bytes = static_cast<double>(n) * steps;
        const double h2d = alone.stats.h2d_gbps();
        // Overlap: the share of the shorter phase hidden under the other (1 = fully hidden).
        const double hidden = alone.wall_seconds + compute_s - both.wall_seconds;
        const double overlap = hidden / std::min(alone.wall_seconds, compute_s);
        ok = ok && h2d >= 0.85 * peak;
        r.line("%9zu %6llu %9.2f %7.1f%% %11.2f %10.3f %10.3f %10.3f %10.2f %8.0f%%", mib,
               static_cast<unsigned long long>(steps), h2d, 100 * h2d / peak,
               bytes / alone.wall_seconds / 1e9, alone.wall_seconds, compute_s, both.wall_seconds,
               bytes / both.wall_seconds / 1e9, 100 * overlap);
    }
    r.line("pinned H2D >= 85%% of the pinned cudaMemcpy peak for batches >= 8 MiB: %s",
           ok ? "yes" : "NO");
    return ok;
}

// Every staged batch's device bytes equal the bytes filled (fresh seed).
bool verify(Report& r, const DeviceChoice& dev) {
    const std::uint64_t seed =
        (static_cast<std::uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
    const std::size_t slot = 8 * kMiB + 4093;
    StagePipeline p(stage_test::pipeline_options(dev, 3, slot), 24,
                    [seed](std::uint64_t step, std::byte* data, std::size_t capacity) {
                        return stage_test::fill_pattern(seed, step, data, capacity);
                    });
    std::vector<std::byte> host(slot);
    PipelineBatch b;
    std::uint64_t bad = 0;
    while (p.next(b)) {
        check(cudaMemcpy(host.data(), b.data, b.size_bytes, cudaMemcpyDeviceToHost), "read back");
        if (stage_test::first_mismatch(seed, b.step, host.data(), b.size_bytes) != b.size_bytes) {
            ++bad;
        }
    }
    r.line("byte check of 24 staged batches (seed %llu): %s", static_cast<unsigned long long>(seed),
           bad == 0 ? "OK" : "FAILED");
    return bad == 0;
}

}  // namespace

int main(int argc, char** argv) {
    Report r;
    if (argc > 1) r.file = std::fopen(argv[1], "w");
    try {
        const DeviceChoice dev = choose_device(parse_device("auto"), 0);
        if (!dev.cuda) {
            r.line("no usable CUDA device: %s", dev.reason.c_str());
            return 2;
        }
        check(cudaSetDevice(dev.index), "cudaSetDevice");
        cudaDeviceProp prop{};
        check(cudaGetDeviceProperties(&prop, dev.index), "cudaGetDeviceProperties");
        int runtime = 0;
        int driver = 0;
        cudaRuntimeGetVersion(&runtime);
        cudaDriverGetVersion(&driver);
        r.line("device %s: %s, runtime %d, driver %d", dev.name().c_str(), prop.name, runtime,
               driver);
        const double peak = memcpy_sweep(r);
        const bool fast = ring_table(r, dev, peak);
        const bool same = verify(r, dev);
        if (r.file) std::fclose(r.file);
        return same ? (fast ? 0 : 3) : 1;
    } catch (const std::exception& e) {
        r.line("gpu_bench: %s", e.what());
        return 1;
    }
}
