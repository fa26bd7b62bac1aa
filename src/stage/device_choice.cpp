// Which CUDA device a rank uses, and whether its host buffers can be pinned.
#include "stage/device_choice.hpp"

#include <mutex>
#include <string>

#include "mpistage/config.hpp"
#include "mpistage/device.hpp"

#if MPISTAGE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mpistage {

CudaDeviceInfo probe_cuda_device(int node_rank) {
    CudaDeviceInfo info;
#if MPISTAGE_HAVE_CUDA
    static std::once_flag once;
    static int count = 0;
    static std::string reason;
    std::call_once(once, [] {
        const cudaError_t rc = cudaGetDeviceCount(&count);
        if (rc != cudaSuccess) {
            reason = std::string("CUDA runtime: ") + cudaGetErrorString(rc);
            count = 0;
            (void)cudaGetLastError();  // clear the sticky error
        } else if (count == 0) {
            reason = "no CUDA-capable device is visible";
        }
    });
    info.device_count = count;
    info.usable = count > 0;
    info.device = info.usable ? (node_rank < 0 ? 0 : node_rank) % count : -1;
    info.reason = reason;
#else
    (void)node_rank;
    info.reason = "built without the CUDA runtime";
#endif
    return info;
}

namespace detail {

bool choose_pinned_device(bool requested, int node_rank) {
    if (!requested) return false;
    const CudaDeviceInfo dev = probe_cuda_device(node_rank);
    bool pinned = dev.usable;
#if MPISTAGE_HAVE_CUDA
    if (pinned && cudaSetDevice(dev.device) != cudaSuccess) {
        (void)cudaGetLastError();
        pinned = false;
    }
#endif
    return pinned;
}

}  // namespace detail
}  // namespace mpistage
