#pragma once
/// @file
/// libtorch view of batches (target `mpistage::torch`; this header needs libtorch).

#include <torch/types.h>

#include <string>
#include <vector>

#include "mpistage/device.hpp"
#include "mpistage/loader.hpp"

namespace mpistage {

/// A batch as tensors. Fixed fields are [B, sample_shape...] tensors of the field's dtype
/// (uint8 → torch::kUInt8, int64 → torch::kInt64, float32 → torch::kFloat32, ...; uint16/32/64
/// have no torch dtype in libtorch 1.13 and come as int16/int32/int64 with the same bits).
/// Ragged fields are a uint8 values tensor [total_bytes] plus int64 offsets [B+1] named
/// "<field>.offsets". The tensors share the batch's memory (its ring slot, or for a CUDA batch
/// its device block) without a copy and keep it alive: they stay valid after the next batch
/// arrives; the memory returns to the loader when the last of them is freed. The loader's
/// device delivery (`LoaderOptions::delivery.device`) is the one way to a device.
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

}  // namespace mpistage
