#pragma once
// The stager's own device memory when libtorch's CUDA allocator is not used: a few cudaMalloc
// blocks, allocated on first use, lent as DeviceBuffers and returned when their last owner
// (a staged batch, a tensor over it) is gone. Grows a block only for a larger batch.

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "stage/cuda_api.hpp"
#include "stage/device_stager.hpp"

namespace mpistage::detail {

/// Thread-safe pool of device blocks of one device.
class DevicePool : public std::enable_shared_from_this<DevicePool> {
public:
    /// A pool of at most `blocks` blocks on CUDA device `device`.
    static std::shared_ptr<DevicePool> create(int device, std::size_t blocks);
    /// Lends a block of at least `size_bytes` (call with the pool's device current).
    /// @throws ConfigError when every block is lent, CudaError.
    DeviceBuffer lend(std::size_t size_bytes);
    /// Blocks not lent right now.
    std::size_t free_blocks() const;

private:
    struct Block {
        DeviceMemory memory;
        std::size_t size_bytes = 0;
    };
    DevicePool() = default;
    void give_back(Block* block);

    mutable std::mutex m_;
    int device_ = -1;
    std::vector<std::unique_ptr<Block>> blocks_;
    std::vector<Block*> free_;
};

}  // namespace mpistage::detail
