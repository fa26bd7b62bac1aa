#include "sources/hdf5/hdf5_types.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "mpistage/error.hpp"
#include "sources/hdf5/hdf5_util.hpp"

namespace mpistage::detail {

namespace {

constexpr const char* kFalse = "FALSE";
constexpr const char* kTrue = "TRUE";

/// The predefined native HDF5 type of a numeric dtype (owned by HDF5).
hid_t native_of(DType t) {
    // clang-format off
    switch (t) {
    case DType::uint8: return H5T_NATIVE_UINT8;
    case DType::int8: return H5T_NATIVE_INT8;
    case DType::uint16: return H5T_NATIVE_UINT16;
    case DType::int16: return H5T_NATIVE_INT16;
    case DType::uint32: return H5T_NATIVE_UINT32;
    case DType::int32: return H5T_NATIVE_INT32;
    case DType::uint64: return H5T_NATIVE_UINT64;
    case DType::int64: return H5T_NATIVE_INT64;
    case DType::float32: return H5T_NATIVE_FLOAT;
    case DType::float64: return H5T_NATIVE_DOUBLE;
    case DType::boolean: break;  // an enum, made by memory_type
    }
    // clang-format on
    return H5T_NATIVE_UINT8;
}

}  // namespace

bool is_h5py_bool(hid_t type) {
    if (H5Tget_class(type) != H5T_ENUM || H5Tget_size(type) != 1 || H5Tget_nmembers(type) != 2) {
        return false;
    }
    // Over a signed byte, as h5py writes it (an unsigned base would read a stray byte as 0xFF
    // through H5Dread's enum conversion).
    const H5Type base(H5Tget_super(type));
    if (!base || H5Tget_class(base.get()) != H5T_INTEGER || H5Tget_sign(base.get()) != H5T_SGN_2) {
        hdf5_error_stack();
        return false;
    }
    std::int8_t f = -1;
    std::int8_t t = -1;
    const bool ok = H5Tenum_valueof(type, kFalse, &f) >= 0 && H5Tenum_valueof(type, kTrue, &t) >= 0;
    hdf5_error_stack();  // a missing member name leaves an error on the stack
    return ok && f == 0 && t == 1;
}

std::string type_class_name(hid_t type) {
    static const std::map<H5T_class_t, const char*> names = {
        {H5T_INTEGER, "integer"},     {H5T_FLOAT, "float"},   {H5T_STRING, "string"},
        {H5T_BITFIELD, "bitfield"},   {H5T_OPAQUE, "opaque"}, {H5T_COMPOUND, "compound"},
        {H5T_REFERENCE, "reference"}, {H5T_ENUM, "enum"},     {H5T_VLEN, "variable-length"},
        {H5T_ARRAY, "array"}};
    const auto it = names.find(H5Tget_class(type));
    return it != names.end() ? it->second : "unknown class";
}

std::optional<DType> field_dtype(hid_t type) {
    if (is_h5py_bool(type)) return DType::boolean;
    const H5T_class_t cls = H5Tget_class(type);
    const std::size_t size = H5Tget_size(type);
    if (cls == H5T_INTEGER) {
        const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
        switch (size) {
        case 1: return is_signed ? DType::int8 : DType::uint8;
        case 2: return is_signed ? DType::int16 : DType::uint16;
        case 4: return is_signed ? DType::int32 : DType::uint32;
        case 8: return is_signed ? DType::int64 : DType::uint64;
        default: break;
        }
    } else if (cls == H5T_FLOAT) {
        if (size == 4) return DType::float32;
        if (size == 8) return DType::float64;
    }
    return std::nullopt;
}

DType dtype_of(hid_t type, const std::string& path, const std::string& dataset) {
    if (const auto t = field_dtype(type)) return *t;
    const std::size_t size = H5Tget_size(type);
    throw ConfigError("hdf5: " + path + ": dataset '" + dataset + "' has an unsupported type (" +
                      type_class_name(type) + ", " + std::to_string(size) +
                      " bytes); fields must be fixed-size integers, 4/8-byte floats or h5py "
                      "booleans (an enum of FALSE = 0 and TRUE = 1)");
}

H5Type memory_type(DType t) {
    if (t == DType::boolean) {
        H5Type e(H5Tenum_create(H5T_NATIVE_INT8));
        const std::int8_t f = 0;
        const std::int8_t v = 1;
        if (!e || H5Tenum_insert(e.get(), kFalse, &f) < 0 ||
            H5Tenum_insert(e.get(), kTrue, &v) < 0) {
            throw Hdf5Error("hdf5: cannot make the boolean memory type: " + hdf5_error_stack());
        }
        return e;
    }
    H5Type copy(H5Tcopy(native_of(t)));
    if (!copy) throw Hdf5Error("hdf5: H5Tcopy of a native type: " + hdf5_error_stack());
    return copy;
}

void swap_bytes(std::byte* p, std::uint64_t count, std::size_t elem) {
    if (elem <= 1) return;
    for (std::uint64_t i = 0; i < count; ++i, p += elem) std::reverse(p, p + elem);
}

bool same_as_native(hid_t file_type, hid_t mem_type, bool& swap) {
    swap = false;
    if (H5Tequal(file_type, mem_type) > 0) return true;
    // Two h5py booleans are the same bytes whatever the byte order of their one-byte base
    // (H5Tset_order fails on an enum that has members, so the twin below cannot be made).
    if (is_h5py_bool(file_type) && is_h5py_bool(mem_type)) return true;
    detail::H5Type twin(H5Tcopy(mem_type));
    if (!twin) return false;
    const H5T_order_t order = H5Tget_order(mem_type);
    if (H5Tset_order(twin.get(), order == H5T_ORDER_LE ? H5T_ORDER_BE : H5T_ORDER_LE) < 0) {
        detail::hdf5_error_stack();
        return false;
    }
    swap = H5Tequal(file_type, twin.get()) > 0;
    detail::hdf5_error_stack();
    return swap;
}


}  // namespace mpistage::detail
