#pragma once
/// @file
/// The features of `tf.train.Example` records that a TFRecord source decodes into fields
/// (`TfRecordOptions::features`, `OpenOptions::features`). The decoder itself (protobuf wire
/// format, no protobuf dependency) is internal: src/sources/tfrecord/example_codec.hpp.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/dtype.hpp"

namespace mpistage {

/// The value list a `tf.train.Feature` holds.
enum class FeatureKind : std::uint8_t { bytes, float32, int64 };

/// "bytes", "float" or "int64".
std::string to_string(FeatureKind k);

/// One feature the user wants as a field of every sample.
struct FeatureSpec {
    /// Feature key in the Example's map; also the field name.
    std::string name;
    /// The list type the feature must hold; any other is a FormatError at read time.
    FeatureKind kind = FeatureKind::bytes;
    /// Shape of one sample. float/int64: the list must hold exactly prod(shape) values (empty
    /// shape = scalar, 1 value). bytes: the feature must hold one value of exactly
    /// prod(shape) × dtype_size(dtype) bytes, reinterpreted as `dtype` (little-endian data on a
    /// little-endian host, as numpy's `tobytes()` writes it); empty shape with `ragged`.
    std::vector<std::int64_t> shape;
    /// Element type a bytes feature is reinterpreted as (ignored for float/int64, which give
    /// float32 and int64).
    DType dtype = DType::uint8;
    /// bytes only: the single value is returned as a ragged uint8 field of any length.
    bool ragged = false;

    /// @throws ConfigError for an empty name, negative dimensions, or `ragged` with a shape or a
    ///         non-bytes kind.
    void validate() const;
};

/// Parses the CLI form `NAME:TYPE[:SHAPE]`: TYPE is `bytes`, `float`, `int64`, or
/// `bytes/DTYPE` (a bytes feature reinterpreted as DTYPE, e.g. `image:bytes/uint8:28x28`);
/// SHAPE is dimensions separated by `x` or `,` (empty or absent = scalar). `bytes` without a
/// shape is a ragged uint8 field. Pure. @throws ConfigError naming the bad part.
FeatureSpec parse_feature_spec(const std::string& text);

}  // namespace mpistage
