#pragma once
// The stager's own device memory when libtorch's CUDA allocator is not used: a few cudaMalloc
// blocks, allocated on first use, lent as DeviceLeases and returned when their last owner
// (a staged batch, a tensor over it) is gone. Grows a block only for a larger batch; blocks
// beyond the pool's base count (batches the trainer held) are freed by `trim` (epoch end).
//
// Reuse is stream-ordered, on every stream the batch was used on (as torch's record_stream):
// `use_on(stream)` makes a consumer stream wait for the block's copy and adds it to the
// block's streams; when the block returns, a release event is recorded on each of them (every
// kernel queued there so far); the next batch copied into the block waits on those events on
// the stager's stream (`wait_for_release`), so a copy never overwrites memory a queued kernel
// still reads, and the host never waits. A stream that is capturing a CUDA graph when the block
// returns gets its release point at the block's next lend instead (recording on it would put
// an event into the user's graph; issue 39, bug 8).

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "device/cuda_api.hpp"

namespace mpistage::detail {

class DevicePool;

/// One block lent by a DevicePool: returns to the pool when the last owner is gone (any thread,
/// host functions excepted: the release records events). Thread-safe.
class DeviceLease {
public:
    DeviceLease(const DeviceLease&) = delete;
    DeviceLease& operator=(const DeviceLease&) = delete;
    /// Gives the block back, fenced on every stream it was used on. Never throws.
    ~DeviceLease();
    std::byte* data() const noexcept;
    /// The block's size (≥ the size asked for; rounded to 2 MiB).
    std::size_t size_bytes() const noexcept;
    /// Before the stager writes the block: `writer` waits on the block's last release points
    /// (none for a fresh block). @throws CudaError.
    void wait_for_release(const CudaStream& writer);
    /// After the batch's copies were queued on `writer`: records the copy's end (the block's
    /// `ready` event) that `use_on` waits on. @throws CudaError.
    void mark_ready(const CudaStream& writer);
    /// Makes `stream` (a cudaStream_t; nullptr: the legacy default stream) wait for the copy,
    /// with no host wait, and fences the block's release on it: the block is reused only after
    /// the work queued on `stream` when the last owner is gone. Once per stream (later calls
    /// for it do nothing); the stream must outlive that release (as with torch's
    /// `record_stream`). Thread-safe. @throws CudaError.
    void use_on(void* stream);

private:
    friend class DevicePool;
    struct Block;
    DeviceLease(std::shared_ptr<DevicePool> pool, Block* block) noexcept
        : pool_(std::move(pool)), block_(block) {}
    std::shared_ptr<DevicePool> pool_;
    Block* block_;
};

/// Thread-safe pool of device blocks of one device.
class DevicePool : public std::enable_shared_from_this<DevicePool> {
public:
    /// A pool of `blocks` blocks (more when all are held) on CUDA device `device`.
    static std::shared_ptr<DevicePool> create(int device, std::size_t blocks);
    /// Lends a block of at least `size_bytes` (call with the pool's device current): the one
    /// given back longest ago; the stream that writes it calls `wait_for_release` first.
    /// @throws CudaError (cudaMalloc: out of device memory, the message naming the pool's
    /// blocks and bytes, how many the trainer holds, and what to do), ConfigError when a stream
    /// the block was used on is still capturing a CUDA graph.
    std::shared_ptr<DeviceLease> lend(std::size_t size_bytes);
    /// Frees the blocks given back beyond the pool's base count (batches the trainer held
    /// beyond the window), each after its release points completed (host wait). Call with the
    /// device current, outside a capture. @throws CudaError.
    void trim();
    /// Blocks not lent right now.
    std::size_t free_blocks() const;
    /// Blocks of the pool (lent and free).
    std::size_t blocks() const;
    /// Frees the blocks under the pool's device (no context elsewhere).
    ~DevicePool();

private:
    friend class DeviceLease;
    using Block = DeviceLease::Block;
    DevicePool() = default;
    void give_back(Block* block) noexcept;
    void prepare(Block& b, std::size_t size_bytes);
    std::size_t held_bytes() const;

    mutable std::mutex m_;
    int device_ = -1;
    std::size_t base_blocks_ = 0;
    std::vector<std::unique_ptr<Block>> blocks_;
    // Oldest release first: the block lent is the one whose consumer work was queued longest
    // ago, so a copy into it rarely waits for a kernel still running.
    std::deque<Block*> free_;
};

}  // namespace mpistage::detail
