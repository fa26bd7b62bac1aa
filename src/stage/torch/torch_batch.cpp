#include "mpistage/torch.hpp"

namespace mpistage {

torch::ScalarType torch_dtype(DType t) {
    switch (t) {
    case DType::uint8: return torch::kUInt8;
    case DType::int8: return torch::kInt8;
    case DType::uint16:
    case DType::int16: return torch::kInt16;
    case DType::uint32:
    case DType::int32: return torch::kInt32;
    case DType::uint64:
    case DType::int64: return torch::kInt64;
    case DType::float32: return torch::kFloat32;
    case DType::float64: return torch::kFloat64;
    case DType::boolean: return torch::kBool;
    }
    throw ConfigError("torch: no torch dtype for " + dtype_name(t));
}

const torch::Tensor& TorchBatch::operator[](const std::string& name) const {
    for (std::size_t i = 0; i < names.size(); ++i) {
        if (names[i] == name) return tensors[i];
    }
    throw ConfigError("torch: batch has no field '" + name + "'");
}

namespace {

// A tensor over batch memory whose deleter holds a copy of the slot lease.
torch::Tensor wrap(const void* data, std::vector<std::int64_t> sizes, torch::ScalarType dtype,
                   const std::shared_ptr<void>& lease) {
    auto* keep = new std::shared_ptr<void>(lease);
    return torch::from_blob(const_cast<void*>(data), sizes,
                            [keep](void*) { delete keep; },
                            torch::TensorOptions().dtype(dtype));
}

}  // namespace

TorchBatch to_torch(const HostBatch& batch, torch::Device device) {
    TorchBatch out;
    const auto b = static_cast<std::int64_t>(batch.size());
    for (const HostField& f : batch.fields()) {
        if (f.info->ragged) {
            out.names.push_back(f.info->name);
            out.tensors.push_back(wrap(f.data, {static_cast<std::int64_t>(f.size_bytes)},
                                       torch::kUInt8, batch.lease()));
            out.names.push_back(f.info->name + ".offsets");
            out.tensors.push_back(wrap(f.offsets, {b + 1}, torch::kInt64, batch.lease()));
            continue;
        }
        std::vector<std::int64_t> sizes{b};
        sizes.insert(sizes.end(), f.info->sample_shape.begin(), f.info->sample_shape.end());
        out.names.push_back(f.info->name);
        out.tensors.push_back(wrap(f.data, sizes, torch_dtype(f.info->dtype), batch.lease()));
    }
    out.index = wrap(batch.index(), {b}, torch::kInt64, batch.lease());
    out.valid = wrap(batch.valid(), {b}, torch::kBool, batch.lease());
    if (device != torch::kCPU) {
        for (auto& t : out.tensors) t = t.to(device, /*non_blocking=*/true);
        out.index = out.index.to(device, true);
        out.valid = out.valid.to(device, true);
    }
    return out;
}

}  // namespace mpistage
