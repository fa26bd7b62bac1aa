// Loader batches as tensors (mpistage/torch.hpp): to_torch and the dtype map.
#include "mpistage/torch.hpp"
#include "stage/torch/torch_parts.hpp"

namespace mpistage {

torch::ScalarType torch_dtype(DType t) {
    switch (t) {
        case DType::uint8:
            return torch::kUInt8;
        case DType::int8:
            return torch::kInt8;
        case DType::uint16:
        case DType::int16:
            return torch::kInt16;
        case DType::uint32:
        case DType::int32:
            return torch::kInt32;
        case DType::uint64:
        case DType::int64:
            return torch::kInt64;
        case DType::float32:
            return torch::kFloat32;
        case DType::float64:
            return torch::kFloat64;
        case DType::boolean:
            return torch::kBool;
    }
    throw ConfigError("torch: no torch dtype for " + dtype_name(t));
}

const torch::Tensor& TorchBatch::operator[](const std::string& name) const {
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (names[i] == name) return tensors[i];
    }
    throw ConfigError("torch: batch has no field '" + name + "'");
}

namespace detail {

TorchBatch torch_batch(const std::vector<BatchPart>& parts, const std::vector<std::byte*>& data,
                       const DeviceChoice& device, const std::shared_ptr<void>& lease) {
    TorchBatch out;
    const std::size_t fields = parts.size() - 2;  // then "index" and "valid"
    for (std::size_t i = 0; i < parts.size(); ++i) {
        torch::Tensor t =
            tensor_over(data[i], parts[i].sizes, torch_dtype(parts[i].dtype), device, lease);
        if (i < fields) {
            out.names.push_back(parts[i].name);
            out.tensors.push_back(std::move(t));
        } else if (i == fields) {
            out.index = std::move(t);
        } else {
            out.valid = std::move(t);
        }
    }
    return out;
}

std::vector<std::byte*> host_pointers(const std::vector<BatchPart>& parts) {
    std::vector<std::byte*> out;
    for (const BatchPart& p : parts) {
        out.push_back(static_cast<std::byte*>(const_cast<void*>(p.span.data)));
    }
    return out;
}

}  // namespace detail

TorchBatch to_torch(const HostBatch& batch, torch::Device device) {
    const std::vector<detail::BatchPart> parts = detail::batch_parts(batch);
    TorchBatch out =
        detail::torch_batch(parts, detail::host_pointers(parts), DeviceChoice{}, batch.lease());
    if (device != torch::kCPU) {
        // Synchronous: a non_blocking copy would let the slot return to the ring (when the
        // host tensors die) while the copy still reads it. TorchStager overlaps safely.
        for (auto& t : out.tensors) t = t.to(device);
        out.index = out.index.to(device);
        out.valid = out.valid.to(device);
    }
    return out;
}

}  // namespace mpistage
