// Loader batches as tensors (mpistage/torch.hpp): to_torch and the dtype map.
#include <ATen/DLConvertor.h>
#include <torch/version.h>

#include "mpistage/dlpack.hpp"
#include "mpistage/torch.hpp"

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

namespace {

// One part of `batch` as a tensor through DLPack (no copy; the tensor holds the lease).
torch::Tensor part_tensor(const HostBatch& batch, const std::string& name) {
    dlpack::DLManagedTensor* m = to_dlpack(batch, name);
    // libtorch 1.13 reads DLPack 0.6 (unsigned types wider than 8 bits come as the signed type
    // of the same width, as torch_dtype says).
    const bool is_bool = to_legacy_dtypes(m);
    torch::Tensor t;
    try {
#if TORCH_VERSION_MAJOR >= 2
        // libtorch 2 deprecates the const overload (and later releases remove it).
        t = at::fromDLPack(reinterpret_cast<::DLManagedTensor*>(m));
#else
        t = at::fromDLPack(reinterpret_cast<const ::DLManagedTensor*>(m));  // 1.x: the only one
#endif
    } catch (...) {
        m->deleter(m);
        throw;
    }
    return is_bool ? t.view(torch::kBool) : t;
}

}  // namespace

TorchBatch to_torch(const HostBatch& batch, torch::Device device) {
    TorchBatch out;
    for (const std::string& name : dlpack_names(batch)) {
        torch::Tensor t = part_tensor(batch, name);
        if (batch.device() < 0 && device != torch::kCPU) {
            // Synchronous: a non_blocking copy would let the slot return to the ring (when
            // the host tensors die) while the copy still reads it.
            t = t.to(device);
        }
        if (name == "index") {
            out.index = std::move(t);
        } else if (name == "valid") {
            out.valid = std::move(t);
        } else {
            out.names.push_back(name);
            out.tensors.push_back(std::move(t));
        }
    }
    return out;
}

}  // namespace mpistage
