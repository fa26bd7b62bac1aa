// Emulated compute for the GPU benchmark: a clock64 spin kernel on every SM, calibrated once.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>

#include "compute.hpp"

namespace {

__global__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// Cycles of clock64 per microsecond, measured with events (no deprecated clock attribute).
double cycles_per_us(cudaStream_t stream) {
    static double rate = 0;
    if (rate > 0) return rate;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    const long long cycles = 20000000;
    spin<<<1, 1, 0, stream>>>(cycles / 10);  // warm-up
    cudaEventRecord(a, stream);
    spin<<<1, 1, 0, stream>>>(cycles);
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    rate = static_cast<double>(cycles) / (static_cast<double>(ms) * 1e3);
    return rate;
}

}  // namespace

void launch_compute(double microseconds) {
    cudaStream_t stream = nullptr;  // the legacy default stream, as a training step
    int device = 0;
    int sms = 1;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    const auto cycles = static_cast<long long>(microseconds * cycles_per_us(stream));
    spin<<<sms, 32, 0, stream>>>(cycles);
}

const char* compute_kind() {
    return "spin kernel on every SM";
}
