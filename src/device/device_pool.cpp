// The stager's own device memory pool (device_pool.hpp).
#include "device/device_pool.hpp"

#include <string>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

constexpr std::size_t kGranule = std::size_t{2} << 20;  // 2 MiB, the driver's large page

}  // namespace

std::shared_ptr<DevicePool> DevicePool::create(int device, std::size_t blocks,
                                               void* consumer_stream) {
    std::shared_ptr<DevicePool> pool(new DevicePool());
    pool->device_ = device;
    pool->consumer_stream_ = consumer_stream;
    for (std::size_t i = 0; i < blocks; ++i) {
        pool->blocks_.push_back(std::make_unique<Block>());
        pool->free_.push_back(pool->blocks_.back().get());
    }
    return pool;
}

// Makes `b` ready for a new batch of `size_bytes` (device current, `b` not in the free list).
void DevicePool::prepare(Block& b, std::size_t size_bytes) {
    if (!b.fence) b.fence = make_event();
    if (b.unfenced_release) {
        // The release point could not be recorded: wait (host) for the consumer's stream.
        const CudaEvent now = make_event();
        record_on(now, consumer_stream_);
        synchronize(now);
        b.unfenced_release = false;
    }
    if (b.size_bytes < size_bytes) {
        b.memory.reset();  // cudaFree synchronises the device: nothing reads it any more
        b.size_bytes = 0;
        b.fenced = false;
        const std::size_t rounded = (size_bytes + kGranule - 1) / kGranule * kGranule;
        b.memory = make_device_memory(rounded);
        b.size_bytes = rounded;
    }
}

DeviceBuffer DevicePool::lend(std::size_t size_bytes) {
    Block* b = nullptr;
    {
        std::lock_guard<std::mutex> lk(m_);
        if (free_.empty()) {  // every block is held (batches, tensors): one more
            blocks_.push_back(std::make_unique<Block>());
            free_.push_back(blocks_.back().get());
        }
        b = free_.front();
        free_.pop_front();
    }
    try {
        prepare(*b, size_bytes);
    } catch (...) {
        std::lock_guard<std::mutex> lk(m_);
        free_.push_front(b);
        throw;
    }
    std::shared_ptr<DevicePool> self = shared_from_this();
    DeviceBuffer out;
    out.data = static_cast<std::byte*>(b->memory.get());
    out.size_bytes = b->size_bytes;
    out.reuse_fence = b->fenced ? &b->fence : nullptr;
    out.owner =
        std::shared_ptr<void>(b, [self](void* p) { self->give_back(static_cast<Block*>(p)); });
    return out;
}

DevicePool::~DevicePool() {
    try {
        DeviceGuard guard(device_);
        blocks_.clear();
    } catch (...) {
        blocks_.clear();
    }
}

std::size_t DevicePool::free_blocks() const {
    std::lock_guard<std::mutex> lk(m_);
    return free_.size();
}

void DevicePool::give_back(Block* block) noexcept {
    // The release point: the consumer's kernels queued so far may still read the block.
    try {
        DeviceGuard guard(device_);
        record_on(block->fence, consumer_stream_);
        block->fenced = true;
    } catch (...) {
        block->fenced = false;
        block->unfenced_release = true;
    }
    std::lock_guard<std::mutex> lk(m_);
    free_.push_back(block);
}

}  // namespace mpistage::detail
