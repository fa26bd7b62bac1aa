// The stager's own device memory pool (device_pool.hpp).
#include "device/device_pool.hpp"

#include <algorithm>
#include <string>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

constexpr std::size_t kGranule = std::size_t{2} << 20;  // 2 MiB, the driver's large page

std::string mib(std::size_t bytes) {
    return std::to_string((bytes + (std::size_t{1} << 20) - 1) >> 20) + " MiB";
}

}  // namespace

struct DeviceLease::Block {
    DeviceMemory memory;
    std::size_t size_bytes = 0;
    CudaEvent ready;              // after the copies of the batch now in the block
    bool ready_recorded = false;  // `ready` holds the copy of the current batch
    std::vector<void*> streams;   // the consumer streams the batch was used on (use_on)
    // The last release: fences[i] recorded on released[i] when the block returned.
    std::vector<CudaEvent> fences;
    std::vector<void*> released;
    std::vector<void*> late;      // capturing at the release: fenced at the next lend
    std::vector<void*> unfenced;  // the record failed: the next lend waits (host) for them
    bool lent = false;
};

// ---- DeviceLease ---------------------------------------------------------------------------

DeviceLease::~DeviceLease() {
    pool_->give_back(block_);
}

std::byte* DeviceLease::data() const noexcept {
    return static_cast<std::byte*>(block_->memory.get());
}

std::size_t DeviceLease::size_bytes() const noexcept {
    return block_->size_bytes;
}

void DeviceLease::wait_for_release(const CudaStream& writer) {
    std::lock_guard<std::mutex> lk(pool_->m_);
    for (std::size_t i = 0; i < block_->released.size(); ++i) {
        stream_wait(writer, block_->fences[i]);
    }
}

void DeviceLease::mark_ready(const CudaStream& writer) {
    std::lock_guard<std::mutex> lk(pool_->m_);
    if (!block_->ready) block_->ready = make_event();
    record(block_->ready, writer);
    block_->ready_recorded = true;
}

void DeviceLease::use_on(void* stream) {
    std::lock_guard<std::mutex> lk(pool_->m_);
    Block& b = *block_;
    if (std::find(b.streams.begin(), b.streams.end(), stream) != b.streams.end()) return;
    if (b.ready_recorded) foreign_stream_wait(stream, b.ready);
    b.streams.push_back(stream);
}

// ---- DevicePool ----------------------------------------------------------------------------

std::shared_ptr<DevicePool> DevicePool::create(int device, std::size_t blocks) {
    std::shared_ptr<DevicePool> pool(new DevicePool());
    pool->device_ = device;
    pool->base_blocks_ = blocks;
    for (std::size_t i = 0; i < blocks; ++i) {
        pool->blocks_.push_back(std::make_unique<Block>());
        pool->free_.push_back(pool->blocks_.back().get());
    }
    return pool;
}

std::size_t DevicePool::held_bytes() const {
    std::size_t bytes = 0;
    for (const auto& b : blocks_) bytes += b->size_bytes;
    return bytes;
}

// Makes `b` ready for a new batch of `size_bytes` (device current, `b` not in the free list).
void DevicePool::prepare(Block& b, std::size_t size_bytes) {
    for (void* s : b.late) {
        // Released while its stream was capturing: the release point is recorded now, later
        // in that stream than the release (so it covers every kernel queued before it).
        if (stream_capturing(s)) {
            throw ConfigError(
                "device pool: a batch was used on a CUDA stream that is still capturing a CUDA "
                "graph; end the capture (torch.cuda.graph) before the loader's next step, and "
                "copy batch tensors into the graph's static inputs instead of capturing reads "
                "of them");
        }
        b.fences.resize(std::max(b.fences.size(), b.released.size() + 1));
        CudaEvent& f = b.fences[b.released.size()];
        if (!f) f = make_event();
        record_on(f, s);
        b.released.push_back(s);
    }
    b.late.clear();
    for (void* s : b.unfenced) {
        // The release point could not be recorded: wait (host) for the consumer's stream.
        const CudaEvent now = make_event();
        record_on(now, s);
        synchronize(now);
    }
    b.unfenced.clear();
    if (b.size_bytes < size_bytes) {
        // The block is freed: wait (host) for the kernels that may still read it, rather than
        // relying on cudaFree's implicit synchronisation.
        for (std::size_t i = 0; i < b.released.size(); ++i) synchronize(b.fences[i]);
        b.released.clear();
        b.memory.reset();
        b.size_bytes = 0;
        b.ready_recorded = false;
        const std::size_t rounded = (size_bytes + kGranule - 1) / kGranule * kGranule;
        try {
            b.memory = make_device_memory(rounded);
        } catch (const CudaError& e) {
            std::size_t count = 0, others_lent = 0, bytes = 0;
            {
                std::lock_guard<std::mutex> lk(m_);
                for (const auto& other : blocks_) {
                    if (other.get() == &b) continue;  // freed above
                    count += other->size_bytes > 0 ? 1 : 0;
                    others_lent += other->lent ? 1 : 0;
                }
                bytes = held_bytes();
            }
            throw CudaError(std::string(e.what()) + " — the loader's device pool on cuda:" +
                            std::to_string(device_) + " asked for " + mib(rounded) +
                            " for a batch while it holds " + std::to_string(count) + " blocks (" +
                            mib(bytes) + "), " + std::to_string(others_lent) +
                            " of them lent to batches in flight or kept by the trainer: the "
                            "device is full; drop (or clone) batches the trainer keeps, lower "
                            "prefetch or the batch size, or release other caches "
                            "(torch.cuda.empty_cache())");
        }
        b.size_bytes = rounded;
    }
    b.streams.clear();
    b.ready_recorded = false;
}

std::shared_ptr<DeviceLease> DevicePool::lend(std::size_t size_bytes) {
    Block* b = nullptr;
    {
        std::lock_guard<std::mutex> lk(m_);
        if (free_.empty()) {  // every block is held (batches, tensors): one more
            blocks_.push_back(std::make_unique<Block>());
            free_.push_back(blocks_.back().get());
        }
        b = free_.front();
        free_.pop_front();
        b->lent = true;
    }
    try {
        prepare(*b, size_bytes);
    } catch (...) {
        std::lock_guard<std::mutex> lk(m_);
        b->lent = false;
        free_.push_front(b);
        throw;
    }
    return std::shared_ptr<DeviceLease>(new DeviceLease(shared_from_this(), b));
}

void DevicePool::trim() {
    std::vector<std::unique_ptr<Block>> dropped;
    {
        std::lock_guard<std::mutex> lk(m_);
        while (blocks_.size() > base_blocks_ && !free_.empty()) {
            Block* b = free_.back();  // the newest release: the last to be lent
            free_.pop_back();
            const auto it = std::find_if(blocks_.begin(), blocks_.end(),
                                         [b](const auto& p) { return p.get() == b; });
            dropped.push_back(std::move(*it));
            blocks_.erase(it);
        }
    }
    for (auto& b : dropped) {
        for (std::size_t i = 0; i < b->released.size(); ++i) synchronize(b->fences[i]);
        for (void* s : b->unfenced) {
            const CudaEvent now = make_event();
            record_on(now, s);
            synchronize(now);
        }
        for (void* s : b->late) {
            const CudaEvent now = make_event();
            record_on(now, s);
            synchronize(now);
        }
    }
    dropped.clear();  // cudaFree after every reader finished
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

std::size_t DevicePool::blocks() const {
    std::lock_guard<std::mutex> lk(m_);
    return blocks_.size();
}

void DevicePool::give_back(Block* block) noexcept {
    // The release points: the consumers' kernels queued so far may still read the block.
    std::lock_guard<std::mutex> lk(m_);
    block->released.clear();
    try {
        DeviceGuard guard(device_);
        for (void* s : block->streams) {
            if (stream_capturing(s)) {  // no event into the user's graph: fenced at the next lend
                block->late.push_back(s);
                continue;
            }
            try {
                block->fences.resize(std::max(block->fences.size(), block->released.size() + 1));
                CudaEvent& f = block->fences[block->released.size()];
                if (!f) f = make_event();
                record_on(f, s);
                block->released.push_back(s);
            } catch (...) {
                block->unfenced.push_back(s);
            }
        }
    } catch (...) {  // the device cannot be made current: the next lend waits for each stream
        block->unfenced.insert(block->unfenced.end(), block->streams.begin(), block->streams.end());
    }
    block->streams.clear();
    block->lent = false;
    free_.push_back(block);
}

}  // namespace mpistage::detail
