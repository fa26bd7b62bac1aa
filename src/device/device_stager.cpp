// Host → device staging on a dedicated stream (device_stager.hpp).
#include "device/device_stager.hpp"

#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "device/device_pool.hpp"
#include "device/host_memory.hpp"
#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

constexpr std::size_t kMaxDepth = 4096;  // the loader's largest prefetch
constexpr std::size_t kPartAlign = 256;  // cudaMalloc's alignment, kept for every part

std::size_t aligned(std::size_t n) {
    return (n + kPartAlign - 1) / kPartAlign * kPartAlign;
}

// The events of one batch's copy; reused once the copy was accounted.
struct CopyEvents {
    CudaEvent start;  // on the stager's stream before the copies
    CudaEvent done;   // after the copies: the batch is on the device
};

// Pinned blocks that pageable spans are copied through; one per batch in flight, returned by
// the batch's host function (any thread).
struct BouncePool {
    std::mutex m;
    std::vector<HostBlock> free;
};

// What the host function after a batch's copies releases (no CUDA call: the ring slot and the
// bounce block only return to their free lists, the stager outlives its stream's work).
struct HostRelease {
    std::shared_ptr<void> host_lease;
    std::shared_ptr<void> bounce;
};

void release_host_memory(void* data) {
    delete static_cast<HostRelease*>(data);
}

// What host functions handed over to be dropped outside them (release_outside_host_function).
// Never destroyed: what is left at exit is not freed after the CUDA runtime's teardown.
struct Deferred {
    std::mutex m;
    std::vector<std::shared_ptr<void>> owners;
};
Deferred& deferred() {
    static Deferred* d = new Deferred();
    return *d;
}

}  // namespace

void release_outside_host_function(std::shared_ptr<void> owner) {
    Deferred& d = deferred();
    std::lock_guard<std::mutex> lk(d.m);
    d.owners.push_back(std::move(owner));
}

void release_deferred() noexcept {
    Deferred& d = deferred();
    std::vector<std::shared_ptr<void>> dropped;
    {
        std::lock_guard<std::mutex> lk(d.m);
        dropped.swap(d.owners);
    }
    dropped.clear();  // outside the lock: a last owner's destructor frees pinned memory
}

struct DeviceStager::Impl {
    struct InFlight {  // a copy not yet accounted in the stats
        std::unique_ptr<CopyEvents> events;
        std::uint64_t bytes = 0;
    };

    StagerOptions options;
    StageStats stats;
    CudaStream stream;
    std::vector<std::unique_ptr<CopyEvents>> spare_events;
    std::deque<InFlight> in_flight;
    std::shared_ptr<DevicePool> pool;
    std::shared_ptr<BouncePool> bounce_pool = std::make_shared<BouncePool>();
    std::deque<StagedBatch> pending;
    std::uint64_t next_sequence = 0;

    bool cuda() const { return options.device.cuda; }
    std::shared_ptr<DeviceLease> allocate(std::size_t size_bytes);
    std::shared_ptr<void> bounce(std::size_t size_bytes);
    void enqueue(StagedBatch& b, const std::vector<HostSpan>& spans, std::size_t total,
                 std::shared_ptr<void> host_lease);
    void reap(bool wait);
};

std::shared_ptr<DeviceLease> DeviceStager::Impl::allocate(std::size_t size_bytes) {
    if (!pool) pool = DevicePool::create(options.device.index, options.pool_buffers);
    return pool->lend(size_bytes);
}

std::shared_ptr<void> DeviceStager::Impl::bounce(std::size_t size_bytes) {
    HostBlock block;
    {
        std::lock_guard<std::mutex> lk(bounce_pool->m);
        if (!bounce_pool->free.empty()) {
            block = std::move(bounce_pool->free.back());
            bounce_pool->free.pop_back();
        }
    }
    if (block.size_bytes() < size_bytes) block = HostBlock(size_bytes, true);  // grows, rarely
    auto* owned = new HostBlock(std::move(block));
    std::shared_ptr<BouncePool> bp = bounce_pool;
    return std::shared_ptr<void>(owned, [bp](void* p) {
        auto* b = static_cast<HostBlock*>(p);
        std::lock_guard<std::mutex> lk(bp->m);
        bp->free.push_back(std::move(*b));
        delete b;
    });
}

void DeviceStager::Impl::enqueue(StagedBatch& b, const std::vector<HostSpan>& spans,
                                 std::size_t total, std::shared_ptr<void> host_lease) {
    std::shared_ptr<DeviceLease> buffer = allocate(total);
    std::unique_ptr<CopyEvents> ev;
    if (spare_events.empty()) {
        ev = std::make_unique<CopyEvents>();
        ev->start = make_event();
        ev->done = make_event();
    } else {
        ev = std::move(spare_events.back());
        spare_events.pop_back();
    }
    std::size_t pageable = 0;
    for (const HostSpan& s : spans) pageable += s.pinned ? 0 : s.size_bytes;
    auto release = std::make_unique<HostRelease>();
    release->host_lease = std::move(host_lease);
    std::byte* staging = nullptr;
    if (pageable > 0) {
        release->bounce = bounce(pageable);
        staging = static_cast<HostBlock*>(release->bounce.get())->data();
    }
    buffer->wait_for_release(stream);
    record(ev->start, stream);
    std::size_t offset = 0;
    for (const HostSpan& s : spans) {
        std::byte* dst = buffer->data() + offset;
        const void* src = s.data;
        if (!s.pinned && s.size_bytes > 0) {
            std::memcpy(staging, s.data, s.size_bytes);
            src = staging;
            staging += s.size_bytes;
        }
        if (s.size_bytes > 0) copy_to_device_async(dst, src, s.size_bytes, stream);
        b.parts.push_back(dst);
        offset += aligned(s.size_bytes);
    }
    record(ev->done, stream);
    buffer->mark_ready(stream);
    // The host memory returns exactly when the copies are done, in stream order.
    launch_host_func(stream, &release_host_memory, release.get());
    release.release();
    b.lease = buffer;
    b.device_lease = std::move(buffer);
    b.done = &ev->done;
    std::uint64_t bytes = 0;
    for (std::size_t n : b.sizes) bytes += n;
    in_flight.push_back({std::move(ev), bytes});
}

// Accounts copies that completed (all of them, waiting, when `wait`) and recycles their events.
void DeviceStager::Impl::reap(bool wait) {
    while (!in_flight.empty()) {
        InFlight& f = in_flight.front();
        if (wait) {
            synchronize(f.events->done);
        } else if (!completed(f.events->done)) {
            return;
        }
        stats.bytes_copied += f.bytes;
        stats.copy_seconds += elapsed_seconds(f.events->start, f.events->done);
        for (StagedBatch& b : pending) {
            if (b.done == &f.events->done) b.done = nullptr;
        }
        spare_events.push_back(std::move(f.events));
        in_flight.pop_front();
    }
}

DeviceStager::DeviceStager(StagerOptions options) : impl_(std::make_unique<Impl>()) {
    Impl& d = *impl_;
    d.options = std::move(options);
    if (d.options.depth == 0 || d.options.depth > kMaxDepth) {
        throw ConfigError("stage: depth " + std::to_string(d.options.depth) + " is outside 1.." +
                          std::to_string(kMaxDepth));
    }
    if (d.options.pool_buffers < d.options.depth + 1) {
        throw ConfigError("stage: pool_buffers " + std::to_string(d.options.pool_buffers) +
                          " must be at least depth + 1 = " + std::to_string(d.options.depth + 1));
    }
    if (!d.cuda()) return;
    DeviceGuard guard(d.options.device.index);
    d.stream = make_stream();
}

void DeviceStager::check() const {
    const Impl& d = *impl_;
    if (!d.cuda() || !d.stream) return;
    DeviceGuard guard(d.options.device.index);
    (void)stream_idle(d.stream);
}

DeviceStager::~DeviceStager() {
    Impl& d = *impl_;
    if (d.cuda() && d.stream) {
        // Host functions still queued release ring slots and bounce blocks: let them run while
        // everything they touch is alive. Device memory of batches not taken returns to its
        // pool with them (fenced on the consumer's stream). Under the stager's device, so
        // the calls create no context elsewhere.
        try {
            DeviceGuard guard(d.options.device.index);
            synchronize_noexcept(d.stream);
            release_deferred();  // every host function of the stream ran
            d.pending.clear();
            d.spare_events.clear();
            d.in_flight.clear();
            d.stream.reset();
        } catch (...) {
            synchronize_noexcept(d.stream);  // no guard possible: still never release early
        }
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
    StagedBatch b;
    b.sequence = d.next_sequence;
    b.device = d.options.device;
    std::size_t total = 0;
    for (const HostSpan& s : spans) {
        b.sizes.push_back(s.size_bytes);
        total += aligned(s.size_bytes);
    }
    if (!d.cuda()) {
        for (const HostSpan& s : spans) {
            b.parts.push_back(static_cast<std::byte*>(const_cast<void*>(s.data)));
        }
        b.lease = std::move(host_lease);
    } else {
        DeviceGuard guard(d.options.device.index);
        d.reap(false);
        try {
            d.enqueue(b, spans, total, std::move(host_lease));
        } catch (...) {
            // Copies already queued may still read the host memory: let them end first.
            synchronize_noexcept(d.stream);
            throw;
        }
        if (!d.options.non_blocking) d.reap(true);
    }
    ++d.next_sequence;
    d.pending.push_back(std::move(b));
}

bool DeviceStager::take(StagedBatch& out) {
    Impl& d = *impl_;
    out = StagedBatch();
    if (d.pending.empty()) return false;
    StagedBatch& b = d.pending.front();
    if (d.cuda() && b.device_lease) {
        DeviceGuard guard(d.options.device.index);
        b.device_lease->use_on(d.options.consumer_stream);  // waits for the copy, no host wait
    }
    b.done = nullptr;
    d.stats.batches += 1;
    out = std::move(b);
    d.pending.pop_front();
    return true;
}

void DeviceStager::discard_pending() noexcept {
    impl_->pending.clear();
}

void DeviceStager::drain() {
    Impl& d = *impl_;
    if (!d.cuda()) return;
    DeviceGuard guard(d.options.device.index);
    d.reap(true);
    // The copies' `done` events complete before the host functions after them run (the
    // runtime calls those from its own thread): only the stream's end says the leases went.
    synchronize(d.stream);
}

void DeviceStager::set_consumer_stream(void* stream) noexcept {
    impl_->options.consumer_stream = stream;
}

void* DeviceStager::consumer_stream() const noexcept {
    return impl_->options.consumer_stream;
}

bool DeviceStager::consumer_capturing() const noexcept {
    const Impl& d = *impl_;
    if (!d.cuda()) return false;
    try {
        DeviceGuard guard(d.options.device.index);
        return stream_capturing(d.options.consumer_stream) || stream_capturing(nullptr);
    } catch (...) {
        return false;  // the device cannot be made current: the next call reports it
    }
}

void DeviceStager::trim() {
    Impl& d = *impl_;
    if (!d.cuda() || !d.pool) return;
    DeviceGuard guard(d.options.device.index);
    d.pool->trim();
}

std::size_t DeviceStager::pool_blocks() const {
    return impl_->pool ? impl_->pool->blocks() : 0;
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
