// Emulated compute without nvcc: a host function that sleeps inside the stream, so the stream
// is busy for the duration while the copy engine is free (the overlap the benchmark measures).
#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>

#include "compute.hpp"

namespace {

void sleep_in_stream(void* microseconds) {
    const double* us = static_cast<double*>(microseconds);
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(*us));
    delete us;
}

}  // namespace

void launch_compute(double microseconds) {
    cudaLaunchHostFunc(nullptr, sleep_in_stream, new double(microseconds));
}

const char* compute_kind() {
    return "host sleep in the stream (no nvcc)";
}
