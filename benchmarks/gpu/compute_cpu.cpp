// The GPU benchmark in a build without the CUDA runtime: the compute step sleeps on the
// calling thread (the loader's I/O threads keep reading meanwhile), and there is no memcpy.
#include <chrono>
#include <thread>

#include "compute.hpp"

void launch_compute(double microseconds) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(microseconds));
}

void wait_compute() {}

const char* compute_kind() {
    return "host sleep on the consumer thread (no CUDA runtime in this build)";
}

double memcpy_sweep(const std::function<void(const std::string&)>& line) {
    line("cudaMemcpy sweep: skipped (no CUDA runtime in this build)");
    return 0;
}

void raw_overlap(std::size_t, int, const std::function<void(const std::string&)>& line) {
    line("raw overlap: skipped (no CUDA runtime in this build)");
}
