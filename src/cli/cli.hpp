#pragma once
// Internals of the `mpistage` executable.

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/dtype.hpp"

namespace mpistage::cli {

/// A whole IDX array in memory, native byte order.
struct IdxArray {
    DType dtype = DType::uint8;
    std::vector<std::uint64_t> dims;
    std::vector<unsigned char> data;
};

/// Reads an IDX file, gzip-compressed or not. @throws IoError, FormatError.
IdxArray read_idx_any(const std::string& path);

/// Writes datasets `images` and `labels` to `out` (via a temporary file, renamed when complete).
/// chunk_rows = 0 writes contiguous datasets; otherwise chunked, gzip when gzip_level > 0.
void write_idx_hdf5(const IdxArray& images, const IdxArray& labels, const std::string& out,
                    std::uint64_t chunk_rows, int gzip_level);

/// Writes `out` as TFRecord of tf.train.Example records with features `image` (bytes: the
/// sample's raw elements, native order) and `label` (int64), one record per sample.
void write_idx_tfrecord(const IdxArray& images, const IdxArray& labels, const std::string& out);

}  // namespace mpistage::cli
