#pragma once
// The CUDA side of the GPU benchmark, behind a header without CUDA types so gpu_bench.cpp builds
// with or without the CUDA runtime: the emulated compute step of a training loop and the
// pinned/pageable cudaMemcpy sweep.

#include <cstddef>
#include <functional>
#include <string>

/// Enqueues about `microseconds` of work on the legacy default stream: a spin kernel on every
/// SM (compute_kernel.cu, with nvcc), a host function sleeping in the stream (compute_host.cpp,
/// CUDA runtime without nvcc) — the stream is busy, the copy engine is not — or, in a build
/// without CUDA (compute_cpu.cpp), a sleep on the calling thread.
void launch_compute(double microseconds);

/// Waits until the work enqueued by `launch_compute` has finished (cudaDeviceSynchronize).
void wait_compute();

/// What launch_compute runs, in words.
const char* compute_kind();

/// Pinned versus pageable cudaMemcpy host → device for 1..256 MiB on the current device, one
/// table line per size through `line`; returns the pinned peak in GB/s (1e9 bytes/s), 0 in a
/// build without CUDA. @throws std::runtime_error naming a failed CUDA call.
double memcpy_sweep(const std::function<void(const std::string&)>& line);

/// The ceiling of the loader's overlap: `steps` pinned host → device copies of `batch_bytes`
/// on a non-blocking stream and `steps` compute steps (launch_compute, each as long as one
/// copy) on the legacy default stream, without the loader and with no dependency between
/// them, each alone and both together (host clock, from the first enqueue to
/// cudaDeviceSynchronize). One table line through `line`; a line saying it was skipped in a
/// build without CUDA. @throws std::runtime_error naming a failed CUDA call.
void raw_overlap(std::size_t batch_bytes, int steps,
                 const std::function<void(const std::string&)>& line);
