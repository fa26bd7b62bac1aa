#pragma once
// libtorch over staged memory (no MPI): tensors that share a staged batch's memory and keep
// its lease, and libtorch's CUDA caching allocator as the stager's device memory.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "mpistage/device.hpp"
#include "stage/device_stager.hpp"

namespace mpistage::detail {

/// The torch device of a choice (torch::kCPU or torch::Device(kCUDA, index)).
torch::Device torch_device(const DeviceChoice& device);

/// A tensor of `sizes` × `dtype` over `data` (host memory for the CPU, device memory of
/// `device` otherwise), without a copy; its deleter holds a copy of `lease`, so the memory
/// (ring slot or device buffer) stays valid as long as the tensor, also after the next batch.
/// Works with a CPU-only libtorch too (the tensor then carries the CUDA device but only
/// libtorch builds with CUDA can run kernels on it).
torch::Tensor tensor_over(void* data, const std::vector<std::int64_t>& sizes,
                          torch::ScalarType dtype, const DeviceChoice& device,
                          const std::shared_ptr<void>& lease);

/// libtorch's CUDA caching allocator as a DeviceAllocator (each batch one uint8 tensor on the
/// device, allocated on the calling thread's current torch stream) when `device` is a CUDA
/// device and libtorch was built with CUDA; empty otherwise (the stager then uses its pool).
DeviceAllocator torch_device_allocator(const DeviceChoice& device);

}  // namespace mpistage::detail
