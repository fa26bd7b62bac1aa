#pragma once
// The emulated compute step of the GPU benchmark: work of a given duration on a stream.

#include <cuda_runtime_api.h>

/// Enqueues about `microseconds` of work on `stream`: a spin kernel on every SM
/// (compute_kernel.cu, when nvcc is available) or, without nvcc, a host function that sleeps
/// in the stream (compute_host.cpp) — the stream is busy either way, the copy engine is not.
void launch_compute(cudaStream_t stream, double microseconds);

/// "spin kernel" or "host sleep": what launch_compute runs.
const char* compute_kind();
