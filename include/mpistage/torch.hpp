#pragma once
/// @file
/// libtorch view of batches (target `mpistage::torch`; this header needs libtorch).

#include <torch/torch.h>

#include <string>
#include <vector>

#include "mpistage/loader.hpp"

namespace mpistage {

/// A batch as tensors. Fixed fields are [B, sample_shape...] tensors of the field's dtype
/// (uint8 → torch::kUInt8, int64 → torch::kInt64, float32 → torch::kFloat32, ...; uint16/32/64
/// have no torch dtype in libtorch 1.13 and come as int16/int32/int64 with the same bits).
/// Ragged fields are a uint8 values tensor [total_bytes] plus int64 offsets [B+1] named
/// "<field>.offsets". The tensors share the ring slot's memory without a copy and keep it alive:
/// they stay valid after the next batch arrives; the slot returns to the ring when the last of
/// them is freed. When `device` is a CUDA device the tensors are copied there with
/// `non_blocking = true` from the (pinned) slot; this needs a CUDA-enabled libtorch.
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

/// Wraps a host batch as tensors without copying (see TorchBatch). Thread-safe for distinct
/// batches. @throws ConfigError when a dtype has no torch equivalent.
TorchBatch to_torch(const HostBatch& batch, torch::Device device = torch::kCPU);

/// The torch scalar type used for `t`.
torch::ScalarType torch_dtype(DType t);

}  // namespace mpistage
