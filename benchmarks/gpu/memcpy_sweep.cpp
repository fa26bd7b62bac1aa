// The pinned versus pageable cudaMemcpy sweep of the GPU benchmark (CUDA runtime builds).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "compute.hpp"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

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

}  // namespace

double memcpy_sweep(const std::function<void(const std::string&)>& line) {
    const std::size_t max_bytes = 256 * kMiB;
    void* pinned = nullptr;
    void* device = nullptr;
    check(cudaHostAlloc(&pinned, max_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaMalloc(&device, max_bytes), "cudaMalloc");
    std::vector<unsigned char> pageable(max_bytes, 1);
    std::memset(pinned, 1, max_bytes);
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    line("cudaMemcpy host -> device (GB/s = 1e9 bytes/s, events):");
    char buf[128];
    std::snprintf(buf, sizeof buf, "%10s %14s %14s", "size_MiB", "pageable_GB/s", "pinned_GB/s");
    line(buf);
    double peak = 0;
    for (std::size_t mib = 1; mib <= 256; mib *= 2) {
        const std::size_t n = mib * kMiB;
        const int reps = static_cast<int>(std::clamp<std::size_t>((2048 * kMiB) / n, 4, 64));
        const double pageable_gbps = copy_gbps(device, pageable.data(), n, reps, s);
        const double pinned_gbps = copy_gbps(device, pinned, n, reps, s);
        peak = std::max(peak, pinned_gbps);
        std::snprintf(buf, sizeof buf, "%10zu %14.2f %14.2f", mib, pageable_gbps, pinned_gbps);
        line(buf);
    }
    std::snprintf(buf, sizeof buf, "pinned peak: %.2f GB/s", peak);
    line(buf);
    cudaStreamDestroy(s);
    cudaFree(device);
    cudaFreeHost(pinned);
    return peak;
}

void raw_overlap(std::size_t batch_bytes, int steps,
                 const std::function<void(const std::string&)>& line) {
    using Clock = std::chrono::steady_clock;
    void* pinned = nullptr;
    void* device = nullptr;
    cudaStream_t s = nullptr;
    struct Release {  // also when a CUDA call throws
        void*& pinned;
        void*& device;
        cudaStream_t& s;
        ~Release() {
            if (s) cudaStreamDestroy(s);
            if (device) cudaFree(device);
            if (pinned) cudaFreeHost(pinned);
        }
    } release{pinned, device, s};
    check(cudaHostAlloc(&pinned, batch_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaMalloc(&device, 2 * batch_bytes), "cudaMalloc");
    std::memset(pinned, 1, batch_bytes);
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    const auto copies = [&] {
        for (int i = 0; i < steps; ++i) {
            void* dst = static_cast<unsigned char*>(device) + (i % 2) * batch_bytes;
            check(cudaMemcpyAsync(dst, pinned, batch_bytes, cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync");
        }
    };
    const auto seconds = [&](auto&& enqueue) {
        const auto t0 = Clock::now();
        enqueue();
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    seconds(copies);  // warm-up
    const double copy_s = seconds(copies);
    const double step_us = copy_s / steps * 1e6;
    const auto computes = [&] {
        for (int i = 0; i < steps; ++i) launch_compute(step_us);
    };
    seconds(computes);  // warm-up
    const double compute_s = seconds(computes);
    const double both_s = seconds([&] {
        for (int i = 0; i < steps; ++i) {
            void* dst = static_cast<unsigned char*>(device) + (i % 2) * batch_bytes;
            check(cudaMemcpyAsync(dst, pinned, batch_bytes, cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync");
            launch_compute(step_us);
        }
    });
    const double overlap = (copy_s + compute_s - both_s) / std::min(copy_s, compute_s);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "raw overlap, %zu MiB x %d, no loader (copies on a non-blocking stream, compute "
                  "on the legacy default stream): copies %.3f s, compute %.3f s, both %.3f s, "
                  "overlap %.0f%%",
                  batch_bytes / kMiB, steps, copy_s, compute_s, both_s, 100 * overlap);
    line(buf);
}

void wait_compute() {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}
