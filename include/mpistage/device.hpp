#pragma once
/// @file
/// CUDA device discovery that tolerates machines without a GPU or with a too-old driver.

#include <string>

namespace mpistage {

/// What the CUDA runtime reports on this process.
struct CudaDeviceInfo {
    /// True when the library was built with the CUDA runtime and a device answered.
    bool usable = false;
    /// Visible devices (0 when not usable).
    int device_count = 0;
    /// Device this rank uses: node-local rank mod device_count (−1 when not usable).
    int device = -1;
    /// Why no device is usable ("built without CUDA", "no CUDA-capable device", ...).
    std::string reason;
};

/// Queries the CUDA runtime once per process and picks `node_rank % device_count`. Never throws:
/// "no device" and "driver insufficient" give `usable = false` with the runtime's text in
/// `reason`. Thread-safe.
CudaDeviceInfo probe_cuda_device(int node_rank);

}  // namespace mpistage
