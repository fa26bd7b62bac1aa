#pragma once
// Host blocks of the batch ring: pinned (cudaHostAlloc) when a device is usable, aligned
// pageable memory otherwise, its pages mapped at allocation. Allocated once per loader, never in
// steady state. Pinned blocks
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
    /// `size_bytes` bytes, pinned (`cudaHostAlloc`, portable) or pageable (4096-aligned). A
    /// pageable block's pages are mapped for writing here (`MADV_POPULATE_WRITE`), as pinned
    /// memory's are, so the first epoch does not pay a page fault per 4 KiB of the ring: on the
    /// benchmark machine, a virtual machine, these faults cost about 13 µs each and made a
    /// 150 KB-sample first epoch 1.1–1.8x longer (benchmarks/README.md, "Warm epochs").
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

    /// Maps the pages of `[data, data + bytes)` (page-aligned, writable, not yet shared with
    /// another thread) for writing; never fails: what the kernel refuses is written instead.
    static void populate(std::byte* data, std::size_t bytes) noexcept;

private:
    void release() noexcept;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0;
    bool pinned_ = false;
};

/// Not collective: throws ConfigError when `ring_bytes` exceed half of this node's physical
/// memory divided among its `node_size` ranks; `what` explains the size, `advice` the remedy.
void check_host_budget(std::uint64_t ring_bytes, int node_size, const std::string& what,
                       const std::string& advice);

}  // namespace mpistage::detail
