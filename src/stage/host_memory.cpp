#include "stage/host_memory.hpp"

#include <cstdlib>
#include <mutex>
#include <new>
#include <utility>

#include "mpistage/config.hpp"
#include "mpistage/device.hpp"
#include "mpistage/error.hpp"

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

HostBlock::HostBlock(std::size_t size_bytes, bool pinned) : size_(size_bytes) {
    const std::size_t n = size_bytes == 0 ? 1 : size_bytes;
#if MPISTAGE_HAVE_CUDA
    if (pinned) {
        void* p = nullptr;
        const cudaError_t rc = cudaHostAlloc(&p, n, cudaHostAllocPortable);
        if (rc != cudaSuccess) {
            throw CudaError(std::string("stage: cudaHostAlloc of ") + std::to_string(n) +
                            " bytes failed: " + cudaGetErrorString(rc));
        }
        data_ = static_cast<std::byte*>(p);
        pinned_ = true;
        return;
    }
#else
    (void)pinned;
#endif
    constexpr std::size_t kAlign = 4096;
    const std::size_t rounded = (n + kAlign - 1) / kAlign * kAlign;
    data_ = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded));
    if (!data_) throw std::bad_alloc();
}

HostBlock::HostBlock(HostBlock&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(o.size_), pinned_(o.pinned_) {}

HostBlock& HostBlock::operator=(HostBlock&& o) noexcept {
    if (this != &o) {
        release();
        data_ = std::exchange(o.data_, nullptr);
        size_ = o.size_;
        pinned_ = o.pinned_;
    }
    return *this;
}

HostBlock::~HostBlock() { release(); }

void HostBlock::release() noexcept {
    if (!data_) return;
#if MPISTAGE_HAVE_CUDA
    if (pinned_) {
        cudaFreeHost(data_);
        data_ = nullptr;
        return;
    }
#endif
    std::free(data_);
    data_ = nullptr;
}

}  // namespace detail
}  // namespace mpistage
