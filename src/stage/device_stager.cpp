// Host → device staging on a dedicated stream (device_stager.hpp).
#include "stage/device_stager.hpp"

#include <chrono>
#include <deque>
#include <string>

#include "mpistage/error.hpp"
#include "stage/cuda_api.hpp"
#include "stage/device_pool.hpp"

namespace mpistage::detail {

namespace {

constexpr std::size_t kMaxDepth = 64;
constexpr std::size_t kPartAlign = 256;  // cudaMalloc's alignment, kept for every part

std::size_t aligned(std::size_t n) {
    return (n + kPartAlign - 1) / kPartAlign * kPartAlign;
}

// The events of one batch in flight, created once per stager and reused round-robin.
struct BatchEvents {
    CudaEvent fence;  // on the default stream at submit: released memory is no longer read
    CudaEvent start;  // on the stager's stream before the copies
    CudaEvent done;   // after the copies: the batch is ready, its host memory is free
};

}  // namespace

struct DeviceStager::Impl {
    struct Pending {
        StagedBatch batch;
        std::shared_ptr<void> host_lease;
        BatchEvents* events = nullptr;
        bool copied = false;  // done event observed complete
    };

    StagerOptions options;
    StageStats stats;
    CudaStream stream;
    std::vector<BatchEvents> events;
    std::shared_ptr<DevicePool> pool;
    std::deque<Pending> pending;
    std::uint64_t next_sequence = 0;

    bool cuda() const { return options.device.cuda; }
    DeviceBuffer allocate(std::size_t size_bytes);
    void enqueue_copies(Pending& p, const std::vector<HostSpan>& spans, std::size_t total);
    void reap();
    void finish(Pending& p);
};

DeviceBuffer DeviceStager::Impl::allocate(std::size_t size_bytes) {
    if (options.allocator) return options.allocator(size_bytes);
    if (!pool) pool = DevicePool::create(options.device.index, options.pool_buffers);
    return pool->lend(size_bytes);
}

void DeviceStager::Impl::enqueue_copies(Pending& p, const std::vector<HostSpan>& spans,
                                        std::size_t total) {
    DeviceBuffer buffer = allocate(total);
    p.events = &events[p.batch.sequence % events.size()];
    record_on_default_stream(p.events->fence);
    stream_wait(stream, p.events->fence);
    record(p.events->start, stream);
    std::size_t offset = 0;
    for (const HostSpan& s : spans) {
        std::byte* dst = buffer.data + offset;
        if (s.size_bytes > 0) copy_to_device_async(dst, s.data, s.size_bytes, stream);
        p.batch.parts.push_back(dst);
        offset += aligned(s.size_bytes);
    }
    record(p.events->done, stream);
    p.batch.lease = std::move(buffer.owner);
}

// Releases the host memory of every batch whose copy has completed (its ring slot returns).
void DeviceStager::Impl::reap() {
    for (Pending& p : pending) {
        if (!p.copied && completed(p.events->done)) finish(p);
    }
}

void DeviceStager::Impl::finish(Pending& p) {
    p.copied = true;
    p.host_lease.reset();
    std::uint64_t bytes = 0;
    for (std::size_t n : p.batch.sizes) bytes += n;
    stats.bytes_copied += bytes;
    stats.copy_seconds += elapsed_seconds(p.events->start, p.events->done);
}

DeviceStager::DeviceStager(StagerOptions options) : impl_(std::make_unique<Impl>()) {
    Impl& d = *impl_;
    d.options = std::move(options);
    if (d.options.depth == 0 || d.options.depth > kMaxDepth) {
        throw ConfigError("stage: depth " + std::to_string(d.options.depth) + " is outside 1.." +
                          std::to_string(kMaxDepth));
    }
    if (!d.options.allocator && d.options.pool_buffers < d.options.depth + 1) {
        throw ConfigError("stage: pool_buffers " + std::to_string(d.options.pool_buffers) +
                          " must be at least depth + 1 = " + std::to_string(d.options.depth + 1));
    }
    if (!d.cuda()) return;
    DeviceGuard guard(d.options.device.index);
    d.stream = make_stream();
    d.events.resize(d.options.depth);
    for (BatchEvents& e : d.events) {
        e.fence = make_event();
        e.start = make_event();
        e.done = make_event();
    }
}

DeviceStager::~DeviceStager() {
    Impl& d = *impl_;
    if (d.cuda() && d.stream) {
        // The host memory of copies in flight must not be reused before they end; the device
        // memory of batches not taken returns to its pool with them.
        synchronize_noexcept(d.stream);
    }
    d.pending.clear();
}

void DeviceStager::submit(const std::vector<HostSpan>& spans, std::shared_ptr<void> host_lease) {
    Impl& d = *impl_;
    if (d.pending.size() >= d.options.depth) {
        throw ConfigError("stage: " + std::to_string(d.pending.size()) +
                          " batches are already submitted and not taken (depth " +
                          std::to_string(d.options.depth) + "); take one first");
    }
    Impl::Pending p;
    p.batch.sequence = d.next_sequence;
    p.batch.device = d.options.device;
    std::size_t total = 0;
    for (const HostSpan& s : spans) {
        p.batch.sizes.push_back(s.size_bytes);
        total += aligned(s.size_bytes);
    }
    if (!d.cuda()) {
        for (const HostSpan& s : spans) {
            p.batch.parts.push_back(static_cast<std::byte*>(const_cast<void*>(s.data)));
        }
        p.batch.lease = std::move(host_lease);
        p.copied = true;
    } else {
        DeviceGuard guard(d.options.device.index);
        d.enqueue_copies(p, spans, total);
        p.host_lease = std::move(host_lease);
        if (!d.options.non_blocking) {
            synchronize(p.events->done);
            d.finish(p);
        }
        d.reap();
    }
    ++d.next_sequence;
    d.pending.push_back(std::move(p));
}

bool DeviceStager::take(StagedBatch& out) {
    Impl& d = *impl_;
    out = StagedBatch();
    if (d.pending.empty()) return false;
    Impl::Pending& p = d.pending.front();
    if (!p.copied) {
        DeviceGuard guard(d.options.device.index);
        const auto t0 = std::chrono::steady_clock::now();
        synchronize(p.events->done);
        d.stats.wait_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        d.finish(p);
    }
    d.stats.batches += 1;
    out = std::move(p.batch);
    d.pending.pop_front();
    return true;
}

std::size_t DeviceStager::pending() const noexcept {
    return impl_->pending.size();
}
const StageStats& DeviceStager::stats() const noexcept {
    return impl_->stats;
}
const DeviceChoice& DeviceStager::device() const noexcept {
    return impl_->options.device;
}

}  // namespace mpistage::detail
