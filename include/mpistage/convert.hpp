#pragma once
/// @file
/// Conversion of IDX files (the MNIST / Fashion-MNIST format, gzip-compressed or not) into the
/// formats mpistage stages. Not collective: call on one rank (the CLI uses rank 0).

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/dtype.hpp"

namespace mpistage {

/// A whole IDX array in memory (dims[0] = N), elements in native byte order.
struct IdxArray {
    DType dtype = DType::uint8;
    std::vector<std::uint64_t> dims;
    std::vector<unsigned char> data;
};

/// Reads an IDX file, gzip-compressed or not (zlib), into memory.
/// @throws IoError (cannot open), FormatError (gzip error, bad magic, size mismatch) naming the file.
IdxArray read_idx_any(const std::string& path);

/// Writes datasets `images` and `labels` to `out` (via a temporary file, renamed when complete).
/// chunk_rows = 0 writes contiguous datasets; otherwise chunked, gzip when gzip_level > 0.
/// Uses HDF5's serial (sec2) driver. @throws ConfigError (record counts differ), Hdf5Error, IoError.
void write_idx_hdf5(const IdxArray& images, const IdxArray& labels, const std::string& out,
                    std::uint64_t chunk_rows, int gzip_level);

/// Writes `out` as TFRecord of tf.train.Example records with features `image` (bytes: the
/// sample's raw elements, native order) and `label` (int64), one record per sample, framed as
/// TensorFlow's record writer does (length, masked CRC32C, payload, masked CRC32C).
/// @throws ConfigError, IoError.
void write_idx_tfrecord(const IdxArray& images, const IdxArray& labels, const std::string& out);

}  // namespace mpistage
