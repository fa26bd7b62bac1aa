#pragma once
// Host → device staging of batches, stream-ordered end to end and without a host wait:
// - one dedicated non-blocking stream per stager, one cudaMemcpyAsync per host span from
//   pinned memory (a pageable span, e.g. a ragged field, is first copied into a pinned bounce
//   block of the stager), one `done` event per batch;
// - the host memory (the ring slot's lease, the bounce block) is released by a host function
//   queued after the copies (cudaLaunchHostFunc): it returns to its ring exactly when the copy
//   completed, never earlier, and with no polling;
// - `take` makes the consumer's stream wait on `done` (cudaStreamWaitEvent): the host goes on;
// - device blocks of the stager's pool are reused only after every stream the batch was used
//   on passed the point where the batch was released (DevicePool, DeviceLease::use_on);
// - nothing is asked of the runtime while the consumer's stream captures a CUDA graph: the
//   loader checks `consumer_capturing` first and refuses the step.
// On the CPU path nothing is copied: a staged batch is the host memory itself.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/cuda_api.hpp"
#include "device/device_pool.hpp"
#include "mpistage/device.hpp"

namespace mpistage::detail {

/// Host bytes of one part of a batch (a field, the index, the valid mask).
struct HostSpan {
    const void* data = nullptr;
    std::size_t size_bytes = 0;
    /// True when `data` is pinned (cudaHostAlloc): copied from directly; otherwise through a
    /// pinned bounce block (a copy from pageable memory would serialise with the device).
    bool pinned = false;
};

/// Options of a stager.
struct StagerOptions {
    /// Where batches go (choose_device). The CPU stages without copying.
    DeviceChoice device;
    /// True: `submit` returns once the copies are enqueued, so the next batch's copy overlaps
    /// the consumer's work on the current one. False: `submit` waits until its copy completed.
    bool non_blocking = true;
    /// The stream the consumer's kernels read batches on (a cudaStream_t; nullptr: the legacy
    /// default stream; `set_consumer_stream` changes it). `take` makes it wait for the copy and
    /// fences the batch's release on it (DeviceLease::use_on). Not owned.
    void* consumer_stream = nullptr;
    /// Batches submitted but not yet taken, at most (1 ≤ depth ≤ 4096).
    std::size_t depth = 2;
    /// Device buffers the stager's pool (DevicePool: cudaMalloc blocks, allocated on first use
    /// and reused, grown only when a batch is larger than before) starts with; it adds one
    /// when all are held: batches in flight plus those the consumer holds; ≥ depth + 1.
    std::size_t pool_buffers = 4;
};

/// Counters of a stager (mpistage/device.hpp).
using StageStats = StagingStats;

/// One staged batch: a pointer per submitted span (device memory, or the host span itself on
/// the CPU path) and the lease that keeps that memory alive. Copies share the memory.
struct StagedBatch {
    std::uint64_t sequence = 0;
    DeviceChoice device;
    std::vector<std::byte*> parts;
    std::vector<std::size_t> sizes;
    /// Device buffer (CUDA) or the host lease (CPU); tensors over the batch hold a copy.
    std::shared_ptr<void> lease;
    /// On CUDA: the same device block as `lease`, typed (DeviceLease::use_on for more streams).
    std::shared_ptr<DeviceLease> device_lease;
    /// The copy's event while the batch is pending (internal; owned by the stager).
    const CudaEvent* done = nullptr;
};

/// Stages batches to one device. Not thread-safe: one consumer thread drives it (the memory
/// of taken batches may be released from any thread). Never changes the caller's current
/// device: every CUDA call runs under a DeviceGuard.
/// Thread-safe, for host functions (which must make no CUDA call): keeps `owner` until the
/// next `release_deferred`, so that dropping it, were it the last owner of pinned memory (a
/// ring reallocated while its slots were lent to copies), never runs cudaFreeHost inside the
/// callback, a documented deadlock (issue 39, bug 5).
void release_outside_host_function(std::shared_ptr<void> owner);
/// Drops what host functions handed to `release_outside_host_function` (CUDA frees may run
/// here). Thread-safe; call on a thread that may make CUDA calls (the consumer's).
void release_deferred() noexcept;

class DeviceStager {
public:
    /// Creates the stream and the events of a CUDA stager (nothing for the CPU).
    /// @throws ConfigError for bad options, CudaError.
    explicit DeviceStager(StagerOptions options);
    /// Waits for the copies in flight (the host memory they read is released only after),
    /// then drops the batches not taken. Taken batches stay valid.
    ~DeviceStager();
    DeviceStager(const DeviceStager&) = delete;
    DeviceStager& operator=(const DeviceStager&) = delete;

    /// Enqueues the copy of one batch (parts in `spans` order, each 256-byte aligned in one
    /// device buffer; the buffer's reuse fence waited on first), records its event and keeps
    /// `host_lease` until the copy completed (released in stream order). If an enqueue fails,
    /// the stream is synchronised before anything is released.
    /// @throws ConfigError when `depth` batches are pending, CudaError.
    void submit(const std::vector<HostSpan>& spans, std::shared_ptr<void> host_lease);
    /// The oldest submitted batch; the consumer's stream waits for its copy (the host does
    /// not). Returns false when none is pending. @throws CudaError.
    bool take(StagedBatch& out);
    /// Drops the batches submitted and not taken (their copies still complete; their device
    /// memory returns to the pool, fenced on the consumer's stream).
    void discard_pending() noexcept;
    /// Waits (host) for every copy submitted so far and for the host functions after them, so
    /// every host lease passed to `submit` has been released on return; accounts the copies in
    /// `stats()`. @throws CudaError.
    void drain();
    /// Throws the CudaError of the copy stream once it failed (a sticky context error: the
    /// runtime then runs no more of its copies or host functions, so leases passed to `submit`
    /// never come back); nothing while its work is queued, running or done. Under the stager's
    /// device; the consumer's thread (as every call here). @throws CudaError.
    void check() const;
    /// The stream later `take`s order batches on (see StagerOptions::consumer_stream).
    void set_consumer_stream(void* stream) noexcept;
    /// The stream `take` orders batches on now.
    void* consumer_stream() const noexcept;
    /// True while the consumer's stream captures a CUDA graph, or the legacy default stream is
    /// blocked by a capture (cuda_api.hpp, stream_capturing): the stager must then make no call
    /// (cudaMalloc, queries and events on that stream invalidate the user's graph). False on
    /// the CPU. Asks nothing that a capture forbids. Never throws.
    bool consumer_capturing() const noexcept;
    /// Frees the pool's device blocks beyond its base count (blocks the consumer held beyond
    /// the window; DevicePool::trim), at an epoch's end. @throws CudaError.
    void trim();
    /// Device blocks of the pool now (0 before the first batch, and on the CPU).
    std::size_t pool_blocks() const;
    /// Submitted batches not yet taken.
    std::size_t pending() const noexcept;
    const StageStats& stats() const noexcept;
    const DeviceChoice& device() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mpistage::detail
