#pragma once
// A complete staging pipeline without MPI: a producer thread fills the slots of a host ring
// (pinned when staging to a CUDA device), a DeviceStager copies them to the device on its own
// stream, the consumer takes staged batches in step order. It is what the loader's last hop
// does, runnable alone: the CPU-fallback tests and the GPU benchmark drive it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "stage/device_stager.hpp"
#include "stage/slot_ring.hpp"

namespace mpistage::detail {

/// Fills one slot for `step`: writes at most `capacity_bytes` at `data` and returns the bytes
/// used. Runs on the producer thread; an exception is rethrown by the consumer's `next`.
using FillFunction =
    std::function<std::size_t(std::uint64_t step, std::byte* data, std::size_t capacity_bytes)>;

/// Options of a pipeline.
struct PipelineOptions {
    /// Where batches go; the CPU path stages without copying (a batch is its ring slot).
    DeviceChoice device;
    /// Host slots of the ring (≥ 1), allocated once.
    std::size_t slots = 3;
    /// Bytes of one slot (the largest batch).
    std::size_t slot_bytes = 0;
    /// Pin the slots (cudaHostAlloc) when the device is a CUDA device.
    bool pin_memory = true;
    /// Stager options (`device` is overwritten with the pipeline's).
    StagerOptions stager;
};

/// One staged batch of the pipeline.
struct PipelineBatch {
    std::uint64_t step = 0;
    /// Where the bytes are: device memory (CUDA) or the host slot (CPU).
    std::byte* data = nullptr;
    std::size_t size_bytes = 0;
    /// Keeps the memory alive (device buffer, or host slot on the CPU path).
    std::shared_ptr<void> lease;
};

/// Producer thread + host ring + stager. Single consumer; not thread-safe otherwise.
class StagePipeline {
public:
    /// Allocates the ring and starts the producer for steps [0, steps).
    /// @throws ConfigError, CudaError, std::bad_alloc.
    StagePipeline(PipelineOptions options, std::uint64_t steps, FillFunction fill);
    /// Stops the producer (also when it waits for a slot), waits for copies in flight and
    /// joins. Batches the consumer holds stay valid; their slots return when they are dropped.
    ~StagePipeline();
    StagePipeline(const StagePipeline&) = delete;
    StagePipeline& operator=(const StagePipeline&) = delete;

    /// The next batch in step order once its copy completed; false after the last step.
    /// Keeps the next batches' copies in flight (up to the stager's depth) before returning.
    /// @throws what the fill function threw (then every later call throws it too);
    ///         ConfigError when every slot is held by batches the consumer kept, so the
    ///         producer can never go on.
    bool next(PipelineBatch& out);

    /// The host ring (tests).
    const HostSlotRing& ring() const noexcept;
    /// The stager's counters.
    const StageStats& stats() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mpistage::detail
