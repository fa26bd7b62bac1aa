// Producer thread + host ring + stager (stage_pipeline.hpp).
#include "stage/stage_pipeline.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "mpistage/error.hpp"
#include "stage/cuda_api.hpp"

namespace mpistage::detail {

struct StagePipeline::Impl {
    PipelineOptions options;
    std::uint64_t steps = 0;
    FillFunction fill;
    std::shared_ptr<HostSlotRing> ring;
    std::unique_ptr<DeviceStager> stager;

    std::mutex m;
    std::condition_variable cv;
    std::deque<std::shared_ptr<HostSlot>> ready;  // filled in step order, not yet submitted
    std::exception_ptr error;
    bool stop = false;
    // Consumer only:
    std::uint64_t submitted = 0;
    std::uint64_t taken = 0;
    std::thread producer;

    void produce() noexcept;
    std::shared_ptr<HostSlot> wait_ready(bool block);
    void shut_down() noexcept;
};

void StagePipeline::Impl::produce() noexcept {
    for (std::uint64_t step = 0; step < steps; ++step) {
        std::shared_ptr<HostSlot> slot = ring->acquire();  // back-pressure
        if (!slot) return;                                 // shut down
        try {
            const std::size_t used = fill(step, slot->block.data(), slot->block.size_bytes());
            if (used > slot->block.size_bytes()) {
                throw ConfigError("stage: step " + std::to_string(step) + " filled " +
                                  std::to_string(used) + " bytes into a slot of " +
                                  std::to_string(slot->block.size_bytes()));
            }
            slot->used_bytes = used;
            slot->step = step;
        } catch (...) {
            std::lock_guard<std::mutex> lk(m);
            error = std::current_exception();
            cv.notify_all();
            return;
        }
        std::lock_guard<std::mutex> lk(m);
        if (stop) return;
        ready.push_back(std::move(slot));
        cv.notify_all();
    }
}

// The next filled slot; with `block`, waits for it (rethrowing the producer's error once
// nothing filled before it is left, and failing when the consumer holds every slot).
std::shared_ptr<HostSlot> StagePipeline::Impl::wait_ready(bool block) {
    std::unique_lock<std::mutex> lk(m);
    for (;;) {
        if (!ready.empty()) {
            std::shared_ptr<HostSlot> s = std::move(ready.front());
            ready.pop_front();
            return s;
        }
        if (!block) return nullptr;
        if (error) std::rethrow_exception(error);
        if (cv.wait_for(lk, std::chrono::milliseconds(20)) == std::cv_status::no_timeout) continue;
        if (ready.empty() && !error && ring->free_slots() == 0 && ring->waiting() > 0) {
            throw ConfigError("stage: all " + std::to_string(ring->slots()) +
                              " ring slots are held by batches (or tensors) the consumer kept, "
                              "so no next batch can be read; drop old batches or add slots");
        }
    }
}

void StagePipeline::Impl::shut_down() noexcept {
    {
        std::lock_guard<std::mutex> lk(m);
        stop = true;
    }
    if (ring) ring->shutdown();
    if (producer.joinable()) producer.join();
    stager.reset();  // waits for copies in flight before their host slots return
    ready.clear();
}

StagePipeline::StagePipeline(PipelineOptions options, std::uint64_t steps, FillFunction fill)
    : impl_(std::make_unique<Impl>()) {
    Impl& d = *impl_;
    d.options = std::move(options);
    d.options.stager.device = d.options.device;
    d.steps = steps;
    d.fill = std::move(fill);
    {
        DeviceGuard guard(d.options.device.cuda ? d.options.device.index : -1);
        d.ring = HostSlotRing::create(d.options.slots, d.options.slot_bytes,
                                      d.options.pin_memory && d.options.device.cuda);
    }
    d.stager = std::make_unique<DeviceStager>(d.options.stager);
    d.producer = std::thread([&d] { d.produce(); });
}

StagePipeline::~StagePipeline() {
    impl_->shut_down();
}

bool StagePipeline::next(PipelineBatch& out) {
    Impl& d = *impl_;
    out = PipelineBatch();
    if (d.taken >= d.steps) return false;
    // Top up the stager: the batch to return (waiting for it) and the following ones (only if
    // already filled), so their copies run while the consumer works on this one.
    const std::size_t depth = d.options.stager.depth;
    while (d.submitted < d.steps && d.stager->pending() < depth) {
        const bool need = d.stager->pending() == 0;
        std::shared_ptr<HostSlot> slot = d.wait_ready(need);
        if (!slot) break;
        const std::vector<HostSpan> spans{{slot->block.data(), slot->used_bytes}};
        d.stager->submit(spans, std::move(slot));
        ++d.submitted;
    }
    StagedBatch b;
    d.stager->take(b);
    out.step = b.sequence;
    out.data = b.parts.front();
    out.size_bytes = b.sizes.front();
    out.lease = std::move(b.lease);
    ++d.taken;
    return true;
}

const HostSlotRing& StagePipeline::ring() const noexcept {
    return *impl_->ring;
}
const StageStats& StagePipeline::stats() const noexcept {
    return impl_->stager->stats();
}

}  // namespace mpistage::detail
