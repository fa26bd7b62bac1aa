// The stager's own device memory pool (device_pool.hpp).
#include "stage/device_pool.hpp"

#include <string>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

constexpr std::size_t kGranule = std::size_t{2} << 20;  // 2 MiB, the driver's large page

}  // namespace

std::shared_ptr<DevicePool> DevicePool::create(int device, std::size_t blocks) {
    std::shared_ptr<DevicePool> pool(new DevicePool());
    pool->device_ = device;
    for (std::size_t i = 0; i < blocks; ++i) {
        pool->blocks_.push_back(std::make_unique<Block>());
        pool->free_.push_back(pool->blocks_.back().get());
    }
    return pool;
}

DeviceBuffer DevicePool::lend(std::size_t size_bytes) {
    Block* b = nullptr;
    {
        std::lock_guard<std::mutex> lk(m_);
        if (free_.empty()) {
            throw ConfigError("stage: all " + std::to_string(blocks_.size()) +
                              " device buffers of cuda:" + std::to_string(device_) +
                              " are held by staged batches or tensors the caller kept; release "
                              "them or raise StagerOptions::pool_buffers");
        }
        b = free_.back();
        free_.pop_back();
    }
    try {
        if (b->size_bytes < size_bytes) {
            b->memory.reset();
            b->size_bytes = 0;
            const std::size_t rounded = (size_bytes + kGranule - 1) / kGranule * kGranule;
            b->memory = make_device_memory(rounded);
            b->size_bytes = rounded;
        }
    } catch (...) {
        give_back(b);
        throw;
    }
    std::shared_ptr<DevicePool> self = shared_from_this();
    DeviceBuffer out;
    out.data = static_cast<std::byte*>(b->memory.get());
    out.size_bytes = b->size_bytes;
    out.owner =
        std::shared_ptr<void>(b, [self](void* p) { self->give_back(static_cast<Block*>(p)); });
    return out;
}

std::size_t DevicePool::free_blocks() const {
    std::lock_guard<std::mutex> lk(m_);
    return free_.size();
}

void DevicePool::give_back(Block* block) {
    std::lock_guard<std::mutex> lk(m_);
    free_.push_back(block);
}

}  // namespace mpistage::detail
