#pragma once
// Streaming inflate of whole-file gzip TFRecords with bounded work before the first error
// (internal, no MPI; callable on bytes in memory for the fuzz target).

#include <cstdint>
#include <string>
#include <vector>

#include "sources/tfrecord/framing.hpp"

namespace mpistage::tfrecord {

/// Limits on one gzip file's decompressed stream (TfRecordOptions fields of the same names).
struct GzipLimits {
    /// Largest decompressed size in bytes.
    std::uint64_t max_decompressed_bytes = std::uint64_t{64} << 30;
    /// Largest decompressed / compressed ratio; 0 = none.
    std::uint64_t max_decompression_ratio = 1000;
    /// Compressed bytes read (and decompressed bytes produced) per step.
    std::uint64_t piece_bytes = std::uint64_t{64} << 20;
};

/// Inflates a whole gzip file (zlib, multi-member as `cat a.gz b.gz` writes; zero padding
/// between members is skipped) of `compressed_bytes` bytes read through `read`, checking the
/// TFRecord framing as the bytes arrive: under `OnCorrupt::error` the first header whose length
/// CRC fails throws at once, before the rest is inflated. Returns the decompressed bytes (the
/// caller walks them for the exact record list; truncation is found there). Not collective.
/// @throws FormatError naming `name` and the offset (corrupt or truncated gzip data, a bad
///         header, a limit exceeded, naming the option), IoError from `read`.
std::vector<std::uint8_t> inflate_tfrecord(const std::string& name, std::uint64_t compressed_bytes,
                                           const ReadAt& read, const GzipLimits& limits,
                                           OnCorrupt on_corrupt);

}  // namespace mpistage::tfrecord
