#pragma once
/// @file
/// DLPack export of batch fields (framework-neutral: a CUDA-enabled libtorch, CuPy or JAX
/// takes a tensor without a copy). The structs below have the layout of DLPack's
/// `DLManagedTensor` (dlpack.h, v0.8/v1 "unversioned" ABI), written from the published
/// specification; pass the pointer to a consumer as its `DLManagedTensor*`
/// (`reinterpret_cast`), e.g. `at::fromDLPack`, `cupy.from_dlpack` via a capsule.

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/batch.hpp"

namespace mpistage {
namespace dlpack {

/// DLDeviceType values used here (kDLCPU, kDLCUDA).
enum : std::int32_t { kDLCPU = 1, kDLCUDA = 2 };
/// DLDataTypeCode values used here.
enum : std::uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBool = 6 };

struct DLDevice {
    std::int32_t device_type;
    std::int32_t device_id;
};
struct DLDataType {
    std::uint8_t code;
    std::uint8_t bits;
    std::uint16_t lanes;
};
struct DLTensor {
    void* data;
    DLDevice device;
    std::int32_t ndim;
    DLDataType dtype;
    std::int64_t* shape;
    std::int64_t* strides;  ///< nullptr: compact row-major
    std::uint64_t byte_offset;
};
struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(DLManagedTensor* self);
};

}  // namespace dlpack

/// Names of the parts of `batch` that `to_dlpack` exports, in order: every field (a ragged
/// field as "<field>" uint8 values [total_bytes] and "<field>.offsets" int64 [B+1]), then
/// "index" (int64 [B]) and "valid" (bool [B], DLPack kDLBool, 8 bits).
std::vector<std::string> dlpack_names(const HostBatch& batch);

/// Exports part `name` of `batch` (see `dlpack_names`) as a DLPack tensor without copying:
/// fixed fields are [B, sample_shape...] of the field's dtype (uint8 → kDLUInt 8, int64 → kDLInt
/// 64, float32 → kDLFloat 32, boolean → kDLBool 8, ...), row-major (strides nullptr). On a CUDA
/// batch the data is device memory (kDLCUDA, the batch's device); on a host batch kDLCPU.
/// The tensor holds the batch's lease (ring slot or device block) until its `deleter` is
/// called, which the consumer must do exactly once; ownership passes to the caller. On a CUDA
/// batch, use it on the loader's `cuda_stream` (or make another stream wait on that one): the
/// copy is ordered before that stream's later work, and the device block is reused only after
/// the work queued on that stream when the last holder (batch or tensor) is gone.
/// Not collective; thread-safe. @throws ConfigError for an unknown name.
dlpack::DLManagedTensor* to_dlpack(const HostBatch& batch, const std::string& name);

/// Rewrites the dtype of `tensor` for consumers that read DLPack 0.6 (libtorch up to 2.0,
/// e.g. Debian's 1.13: no kDLBool, no unsigned type wider than 8 bits): kDLBool becomes
/// kDLUInt 8 and an unsigned type wider than 8 bits the signed type of the same width. The
/// bytes are unchanged. Returns true when the tensor was boolean: view the consumer's tensor
/// as bool (`torch::kBool`, `torch.bool`). Not collective; thread-safe for distinct tensors.
bool to_legacy_dtypes(dlpack::DLManagedTensor* tensor) noexcept;

}  // namespace mpistage
