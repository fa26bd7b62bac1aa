// Host blocks of the batch ring (host_memory.hpp).
#include "device/host_memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <utility>

#include "device/cuda_api.hpp"
#include "mpistage/error.hpp"
#include "util/page_populate.hpp"

#if MPISTAGE_DEVICE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mpistage {

namespace detail {

HostBlock::HostBlock(std::size_t size_bytes, bool pinned) : size_(size_bytes) {
    const std::size_t n = size_bytes == 0 ? 1 : size_bytes;
#if MPISTAGE_DEVICE_CUDA
    if (pinned) {
        void* p = nullptr;
        const cudaError_t rc = cudaHostAlloc(&p, n, cudaHostAllocPortable);
        if (rc != cudaSuccess) {
            (void)cudaGetLastError();  // leave no stale error for the caller's next check
            throw CudaError(std::string("stage: cudaHostAlloc of ") + std::to_string(n) +
                            " bytes failed: " + cudaGetErrorString(rc));
        }
        data_ = static_cast<std::byte*>(p);
        pinned_ = true;
        device_ = current_device_if_context();  // cudaHostAlloc made one current if none was
        return;
    }
#else
    (void)pinned;
#endif
    const std::size_t align = std::max<std::size_t>(4096, page_bytes());
    const std::size_t rounded = (n + align - 1) / align * align;
    data_ = static_cast<std::byte*>(std::aligned_alloc(align, rounded));
    if (!data_) throw std::bad_alloc();
    // The memory may come from the heap, already mapped in part: that stays as it is.
    (void)populate_pages(data_, rounded, PopulateFor::write);
}

HostBlock::HostBlock(HostBlock&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(o.size_),
      pinned_(o.pinned_),
      device_(o.device_) {}

HostBlock& HostBlock::operator=(HostBlock&& o) noexcept {
    if (this != &o) {
        release();
        data_ = std::exchange(o.data_, nullptr);
        size_ = o.size_;
        pinned_ = o.pinned_;
        device_ = o.device_;
    }
    return *this;
}

HostBlock::~HostBlock() {
    release();
}

void HostBlock::release() noexcept {
    if (!data_) return;
#if MPISTAGE_DEVICE_CUDA
    if (pinned_) {
        try {
            // Under the guard: on a thread with no context, cudaFreeHost would create one on
            // device 0 (issue 39, bug 6).
            const DeviceGuard guard(device_);
            cudaFreeHost(data_);
        } catch (...) {
            // The device cannot be made current (a dead context): leak the block rather than
            // free it in a context created on another device.
        }
        data_ = nullptr;
        return;
    }
#endif
    std::free(data_);
    data_ = nullptr;
}

}  // namespace detail
}  // namespace mpistage
