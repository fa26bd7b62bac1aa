#pragma once
/// @file
/// libtorch view of batches (target `mpistage::torch`; this header needs libtorch).

#include <torch/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/device.hpp"
#include "mpistage/loader.hpp"

namespace mpistage {

/// A batch as tensors. Fixed fields are [B, sample_shape...] tensors of the field's dtype
/// (uint8 → torch::kUInt8, int64 → torch::kInt64, float32 → torch::kFloat32, ...; uint16/32/64
/// have no torch dtype in libtorch 1.13 and come as int16/int32/int64 with the same bits).
/// Ragged fields are a uint8 values tensor [total_bytes] plus int64 offsets [B+1] named
/// "<field>.offsets". From `to_torch` the tensors share the ring slot's memory without a copy
/// and keep it alive: they stay valid after the next batch arrives; the slot returns to the
/// ring when the last of them is freed. From `TorchStager` they share one device buffer the
/// same way.
struct TorchBatch {
    /// Field names, in the source's order (plus "<field>.offsets" for ragged fields).
    std::vector<std::string> names;
    /// One tensor per name.
    std::vector<torch::Tensor> tensors;
    /// Global sample ids, int64 [B]; −1 for masked slots.
    torch::Tensor index;
    /// Bool [B]: true where the slot counts as a sample of this epoch.
    torch::Tensor valid;
    /// Tensor of field `name`. @throws ConfigError for unknown names.
    const torch::Tensor& operator[](const std::string& name) const;
};

/// The batch as tensors, built from its DLPack export (`to_dlpack`, mpistage/dlpack.hpp)
/// without copying: CPU tensors for a host batch; for a CUDA batch (the loader's `device` is
/// CUDA) tensors on that device (needs a CUDA-enabled libtorch; this build's CPU libtorch
/// throws). Each tensor holds the batch's lease (ring slot or device block) until it is freed.
/// For a host batch and a CUDA `device`, the tensors are copied there synchronously. Read CUDA
/// tensors on the loader's `cuda_stream`: their copy is ordered before its later work and
/// their memory is reused only after the work queued on it when the last of them is freed
/// (no `record_stream` needed on that stream). Not collective; thread-safe for distinct
/// batches. @throws ConfigError for a dtype without a torch equivalent; c10::Error from
/// libtorch (e.g. CUDA data without CUDA support).
TorchBatch to_torch(const HostBatch& batch, torch::Device device = torch::kCPU);

/// The torch scalar type used for `t`.
torch::ScalarType torch_dtype(DType t);

/// Deprecated, not on the user's path: the loader delivers batches on the device itself
/// (`LoaderOptions::device`, docs/gpu.md); kept for code written against it.
/// Stages host batches to a device as tensors: a dedicated non-blocking CUDA
/// stream, one `cudaMemcpyAsync` per field from the pinned ring slot, one event per batch.
/// `take` returns the oldest batch at once: the legacy default stream waits for its copy (the
/// host does not); the batch's ring slot is released when its copy is done, not before.
/// Only host batches (a loader on the CPU) can be submitted: a batch the loader delivered on
/// a device is a ConfigError (use `to_torch`). Device memory comes
/// from libtorch's CUDA caching allocator when libtorch has CUDA, else from a small pool of
/// the library's own (returned when the last tensor is freed; reuse is ordered after the work
/// queued on the default stream when it was freed). On the CPU (no usable device, `device = "cpu"`)
/// nothing is copied: the tensors are those of `to_torch`. The caller's current CUDA device is
/// never changed. A pending batch holds its ring slot until `submit` or `take` sees its copy
/// completed, so keep the loader's `prefetch` above the batches pending here (the default 2
/// suits the pattern below). Not collective; one thread drives a stager; move-only.
///
///     mpistage::TorchStager stager(loader);
///     for (const auto& batch : loader.epoch(e)) {
///         stager.submit(batch);                        // copy of batch k+1 starts ...
///         if (stager.pending() > 1) train(stager.take());  // ... while batch k trains
///     }
///     while (stager.pending() > 0) train(stager.take());
class TorchStager {
public:
    /// The loader's device (`LoaderStats::device`) and `LoaderOptions::non_blocking`; up to
    /// `depth` batches submitted and not taken. @throws ConfigError, CudaError.
    explicit TorchStager(const Loader& loader, std::size_t depth = 2);
    /// An explicit device (`choose_device`). @throws ConfigError, CudaError.
    TorchStager(const DeviceChoice& device, bool non_blocking, std::size_t depth = 2);
    /// Waits for the copies in flight; batches already taken stay valid.
    ~TorchStager();
    TorchStager(TorchStager&&) noexcept;
    TorchStager& operator=(TorchStager&&) noexcept;

    /// Enqueues the copy of `batch` and keeps its ring slot until the copy completed.
    /// @throws ConfigError when `depth` batches are pending or the device pool is exhausted,
    ///         CudaError.
    void submit(const HostBatch& batch);
    /// The oldest submitted batch as tensors on the device, once its copy completed.
    /// @throws ConfigError when nothing is pending, CudaError.
    TorchBatch take();
    /// `submit` then `take` (no overlap).
    TorchBatch stage(const HostBatch& batch);
    /// Batches submitted and not yet taken.
    std::size_t pending() const noexcept;
    /// Where the tensors are.
    const DeviceChoice& device() const noexcept;
    /// Bytes copied, device time of the copies and host waiting so far.
    StagingStats stats() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mpistage
