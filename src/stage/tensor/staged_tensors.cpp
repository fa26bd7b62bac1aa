// libtorch over staged memory (staged_tensors.hpp).
#include "stage/tensor/staged_tensors.hpp"

#include <torch/cuda.h>

namespace mpistage::detail {

torch::Device torch_device(const DeviceChoice& device) {
    if (!device.cuda) return torch::kCPU;
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device.index));
}

torch::Tensor tensor_over(void* data, const std::vector<std::int64_t>& sizes,
                          torch::ScalarType dtype, const DeviceChoice& device,
                          const std::shared_ptr<void>& lease) {
    const torch::Device where = torch_device(device);
    auto* keep = new std::shared_ptr<void>(lease);  // owned by the tensor's storage from here
    // The target device is given, so libtorch does not ask the CUDA hooks (absent in a
    // CPU-only build) where the pointer lives.
    return at::for_blob(data, sizes)
        .deleter([keep](void*) { delete keep; })
        .options(torch::TensorOptions().dtype(dtype).device(where))
        .target_device(where)
        .make_tensor();
}

DeviceAllocator torch_device_allocator(const DeviceChoice& device) {
    if (!device.cuda || !torch::cuda::is_available()) return {};
    const torch::Device where = torch_device(device);
    return [where](std::size_t size_bytes) {
        auto t = std::make_shared<torch::Tensor>(
            torch::empty({static_cast<std::int64_t>(size_bytes)},
                         torch::TensorOptions().dtype(torch::kUInt8).device(where)));
        DeviceBuffer b;
        b.data = static_cast<std::byte*>(t->data_ptr());
        b.size_bytes = size_bytes;
        b.owner = std::move(t);
        return b;
    };
}

}  // namespace mpistage::detail
