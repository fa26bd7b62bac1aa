// DLPack export of batch parts (mpistage/dlpack.hpp).
#include "mpistage/dlpack.hpp"

#include <memory>

namespace mpistage {

namespace {

// What one exported tensor owns: its shape and the batch's lease.
struct Owner {
    dlpack::DLManagedTensor managed{};
    std::vector<std::int64_t> shape;
    std::shared_ptr<void> lease;
};

void delete_owner(dlpack::DLManagedTensor* self) {
    delete static_cast<Owner*>(self->manager_ctx);
}

dlpack::DLDataType dl_dtype(DType t) {
    const auto bits = static_cast<std::uint8_t>(8 * dtype_size(t));
    switch (t) {
        case DType::uint8:
        case DType::uint16:
        case DType::uint32:
        case DType::uint64:
            return {dlpack::kDLUInt, bits, 1};
        case DType::int8:
        case DType::int16:
        case DType::int32:
        case DType::int64:
            return {dlpack::kDLInt, bits, 1};
        case DType::float32:
        case DType::float64:
            return {dlpack::kDLFloat, bits, 1};
        case DType::boolean:
            return {dlpack::kDLBool, 8, 1};
    }
    return {dlpack::kDLUInt, 8, 1};
}

// The part `name`: data pointer (device or host), dtype and shape.
bool find_part(const HostBatch& b, const std::string& name, const void*& data, DType& dtype,
               std::vector<std::int64_t>& shape) {
    const bool on_device = b.device() >= 0;
    const auto n = static_cast<std::int64_t>(b.size());
    for (const HostField& f : b.fields()) {
        if (f.info->ragged && name == f.info->name + ".offsets") {
            data = on_device ? static_cast<const void*>(f.device_offsets) : f.offsets;
            dtype = DType::int64;
            shape = {n + 1};
            return true;
        }
        if (name != f.info->name) continue;
        data = on_device ? f.device_data : f.data;
        if (f.info->ragged) {
            dtype = DType::uint8;
            shape = {static_cast<std::int64_t>(f.size_bytes)};
        } else {
            dtype = f.info->dtype;
            shape = {n};
            shape.insert(shape.end(), f.info->sample_shape.begin(), f.info->sample_shape.end());
        }
        return true;
    }
    if (name == "index") {
        data = on_device ? static_cast<const void*>(b.device_index()) : b.index();
        dtype = DType::int64;
        shape = {n};
        return true;
    }
    if (name == "valid") {
        data = on_device ? static_cast<const void*>(b.device_valid()) : b.valid();
        dtype = DType::boolean;
        shape = {n};
        return true;
    }
    return false;
}

}  // namespace

std::vector<std::string> dlpack_names(const HostBatch& batch) {
    std::vector<std::string> names;
    for (const HostField& f : batch.fields()) {
        names.push_back(f.info->name);
        if (f.info->ragged) names.push_back(f.info->name + ".offsets");
    }
    names.push_back("index");
    names.push_back("valid");
    return names;
}

dlpack::DLManagedTensor* to_dlpack(const HostBatch& batch, const std::string& name) {
    const void* data = nullptr;
    DType dtype = DType::uint8;
    auto owner = std::make_unique<Owner>();
    if (!find_part(batch, name, data, dtype, owner->shape)) {
        throw ConfigError("dlpack: the batch has no part '" + name +
                          "' (fields, '<ragged field>.offsets', 'index', 'valid')");
    }
    owner->lease = batch.lease();
    dlpack::DLTensor& t = owner->managed.dl_tensor;
    t.data = const_cast<void*>(data);
    t.device = batch.device() >= 0 ? dlpack::DLDevice{dlpack::kDLCUDA, batch.device()}
                                   : dlpack::DLDevice{dlpack::kDLCPU, 0};
    t.ndim = static_cast<std::int32_t>(owner->shape.size());
    t.dtype = dl_dtype(dtype);
    t.shape = owner->shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
    owner->managed.manager_ctx = owner.get();
    owner->managed.deleter = &delete_owner;
    return &owner.release()->managed;
}

bool to_legacy_dtypes(dlpack::DLManagedTensor* tensor) noexcept {
    dlpack::DLDataType& dt = tensor->dl_tensor.dtype;
    const bool is_bool = dt.code == dlpack::kDLBool;
    if (is_bool) dt.code = dlpack::kDLUInt;
    if (dt.code == dlpack::kDLUInt && dt.bits > 8) dt.code = dlpack::kDLInt;
    return is_bool;
}

}  // namespace mpistage
