#pragma once
// The stager's own device memory when libtorch's CUDA allocator is not used: a few cudaMalloc
// blocks, allocated on first use, lent as DeviceBuffers and returned when their last owner
// (a staged batch, a tensor over it) is gone. Grows a block only for a larger batch.
//
// Reuse is stream-ordered: when a block returns, an event is recorded on the consumer's
// stream (the release point: every kernel the consumer queued on it so far); the next batch
// copied into the block waits on that event on the stager's stream (DeviceBuffer::reuse_fence),
// so a copy never overwrites memory a queued kernel still reads, and the host never waits.

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "device/cuda_api.hpp"
#include "device/device_stager.hpp"

namespace mpistage::detail {

/// Thread-safe pool of device blocks of one device.
class DevicePool : public std::enable_shared_from_this<DevicePool> {
public:
    /// A pool of `blocks` blocks (more when all are held) on CUDA device `device`, whose
    /// batches are consumed on
    /// `consumer_stream` (a cudaStream_t; nullptr: the legacy default stream).
    static std::shared_ptr<DevicePool> create(int device, std::size_t blocks,
                                              void* consumer_stream);
    /// Lends a block of at least `size_bytes` (call with the pool's device current): the one
    /// given back longest ago; its `reuse_fence` must be waited on by the stream that writes it.
    /// @throws CudaError (cudaMalloc: out of device memory).
    DeviceBuffer lend(std::size_t size_bytes);
    /// Blocks not lent right now.
    std::size_t free_blocks() const;
    /// Frees the blocks under the pool's device (no context elsewhere).
    ~DevicePool();

private:
    struct Block {
        DeviceMemory memory;
        std::size_t size_bytes = 0;
        CudaEvent fence;      // recorded on the consumer's stream when the block returned
        bool fenced = false;  // `fence` holds a release point to wait for
        bool unfenced_release = false;  // recording failed: synchronise the consumer first
    };
    DevicePool() = default;
    void give_back(Block* block) noexcept;
    void prepare(Block& b, std::size_t size_bytes);

    mutable std::mutex m_;
    int device_ = -1;
    void* consumer_stream_ = nullptr;
    std::vector<std::unique_ptr<Block>> blocks_;
    // Oldest release first: the block lent is the one whose consumer work was queued longest
    // ago, so a copy into it rarely waits for a kernel still running.
    std::deque<Block*> free_;
};

}  // namespace mpistage::detail
