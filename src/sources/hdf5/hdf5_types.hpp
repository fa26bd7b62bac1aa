#pragma once
// HDF5 datatypes ↔ mpistage dtypes (internal). Every function calls HDF5: call it holding
// `hdf5_mutex()` (HDF5 is not thread-safe); those that probe clear HDF5's error stack.

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "mpistage/dtype.hpp"
#include "sources/hdf5/hdf5_util.hpp"

namespace mpistage::detail {

/// True for h5py's boolean: a 1-byte enum over a signed 8-bit integer (either byte order) with
/// exactly the members FALSE = 0 and TRUE = 1, as h5py writes `numpy.bool_`.
bool is_h5py_bool(hid_t type);

/// The class of an HDF5 type in words ("string", "compound", "enum", ...), for messages.
std::string type_class_name(hid_t type);

/// The dtype of a field of HDF5 file type `type` (as `dtype_of`), or none for a type that is not
/// a field type.
std::optional<DType> field_dtype(hid_t type);

/// The dtype of an HDF5 file type: 1/2/4/8-byte integers, 4/8-byte floats, and h5py's boolean
/// (`is_h5py_bool`) as `DType::boolean`. @throws ConfigError naming `path` and `dataset` for
/// strings, compounds, other enums and every other type.
DType dtype_of(hid_t type, const std::string& path, const std::string& dataset);

/// A new HDF5 memory type for `t`, owned by the caller: a copy of the native type of that size,
/// and for `DType::boolean` h5py's boolean enum over the native signed 8-bit integer (so that
/// HDF5 converts an h5py boolean dataset to it by member name). @throws Hdf5Error when HDF5
/// cannot make it.
H5Type memory_type(DType t);

/// Reverses the byte order of `count` elements of `elem` bytes in place.
void swap_bytes(std::byte* p, std::uint64_t count, std::size_t elem);

/// True when `file_type` equals the native `mem_type`, or equals it with the opposite byte
/// order (then `swap` is set): only then may raw file bytes be used as (swapped) native values.
bool same_as_native(hid_t file_type, hid_t mem_type, bool& swap);

}  // namespace mpistage::detail
