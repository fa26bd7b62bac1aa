#pragma once
// Host blocks of the batch ring: pinned (cudaHostAlloc) when a device is usable, aligned
// pageable memory otherwise, its pages mapped at allocation. Allocated when a loader is built
// (and when a budget plan's batch grows), never in steady state. Pinned blocks
// are portable (usable from every device); allocate them under a DeviceGuard of the chosen
// device so no other device gets a context.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mpistage::detail {

/// Move-only owner of one host block. Not thread-safe; the memory may be used from any thread.
class HostBlock {
public:
    HostBlock() = default;
    /// `size_bytes` bytes (0: one page), pinned (`cudaHostAlloc`, portable) or pageable
    /// (aligned to the larger of 4 KiB and the system's page). A pageable block's pages are
    /// mapped for writing here (`populate_pages`, util/page_populate.hpp), as pinned memory's
    /// are: the page faults of the ring move from its first use (the first epoch's reads) into
    /// this call, which then takes time in proportion to `size_bytes` (on the benchmark machine,
    /// a virtual machine, about 13 µs per 4 KiB page: 30 ms for a 150 KB-sample ring of 4 × 16
    /// samples; benchmarks/README.md, "Warm epochs"). The caller owns the block; it frees it on
    /// destruction, on any thread (a pinned block is freed under a DeviceGuard of its device).
    /// @throws CudaError when pinned allocation fails, std::bad_alloc for pageable memory.
    HostBlock(std::size_t size_bytes, bool pinned);
    HostBlock(HostBlock&& o) noexcept;
    HostBlock& operator=(HostBlock&& o) noexcept;
    HostBlock(const HostBlock&) = delete;
    HostBlock& operator=(const HostBlock&) = delete;
    ~HostBlock();

    std::byte* data() const noexcept { return data_; }
    std::size_t size_bytes() const noexcept { return size_; }
    bool pinned() const noexcept { return pinned_; }
    /// The device whose context a pinned block was allocated in (the current device of the
    /// allocating thread); −1 for pageable memory. `cudaFreeHost` runs under a DeviceGuard of
    /// it, so freeing on a thread with no context creates none on device 0.
    int device() const noexcept { return device_; }

private:
    void release() noexcept;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    bool pinned_ = false;
    int device_ = -1;
};

}  // namespace mpistage::detail
