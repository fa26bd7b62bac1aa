#pragma once
// HDF5 datatypes ↔ mpistage dtypes (internal).

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "mpistage/dtype.hpp"

namespace mpistage::detail {

/// The dtype of an HDF5 file type. @throws ConfigError naming `path` and `dataset` for
/// strings, compounds and every other type that is not a 1/2/4/8-byte integer or 4/8-byte float.
DType dtype_of(hid_t type, const std::string& path, const std::string& dataset);

/// The native HDF5 memory type of `t` (owned by HDF5, never closed).
hid_t native_type(DType t);

/// Reverses the byte order of `count` elements of `elem` bytes in place.
void swap_bytes(std::byte* p, std::uint64_t count, std::size_t elem);

/// True when `file_type` equals the native `mem_type`, or equals it with the opposite byte
/// order (then `swap` is set): only then may raw file bytes be used as (swapped) native values.
bool same_as_native(hid_t file_type, hid_t mem_type, bool& swap);

}  // namespace mpistage::detail
