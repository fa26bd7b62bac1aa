#pragma once
/// @file
/// A small decoder (and encoder, for tests and `convert`) of the protobuf wire format of
/// `tf.train.Example` (tensorflow/core/example/example.proto, feature.proto):
///
///     Example  { Features features = 1; }
///     Features { map<string, Feature> feature = 1; }
///     (map entry: { string key = 1; Feature value = 2; })
///     Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
///                             Int64List int64_list = 3; } }
///     BytesList { repeated bytes value = 1; }
///     FloatList { repeated float value = 1 [packed = true]; }
///     Int64List { repeated int64 value = 1 [packed = true]; }
///
/// Packed and unpacked repeated fields are both accepted; when a key repeats, the last entry
/// wins (protobuf map semantics). Unknown fields are skipped. There is no protobuf dependency.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/dtype.hpp"
#include "mpistage/source.hpp"

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

/// Decodes declared features of serialized Examples into batch fields.
/// Immutable after construction; `decode` is thread-safe.
class ExampleDecoder {
public:
    /// @throws ConfigError for an empty list, duplicate names or an invalid spec.
    explicit ExampleDecoder(std::vector<FeatureSpec> specs);

    /// One field per spec, in spec order (float → float32, int64 → int64, bytes → dtype, or
    /// ragged uint8).
    const std::vector<FieldInfo>& fields() const noexcept { return fields_; }
    const std::vector<FeatureSpec>& specs() const noexcept { return specs_; }

    /// Decodes one serialized Example into slot `slot` of every field of `sink` (field i of the
    /// sink is spec i). Not collective; thread-safe for distinct sinks.
    /// @throws FormatError naming `where` (file and offset), the feature and what is wrong
    ///         (malformed protobuf, missing feature, wrong list type, wrong element count).
    void decode(const std::uint8_t* data, std::size_t size_bytes, BatchSink& sink, std::size_t slot,
                const std::string& where) const;

private:
    std::vector<FeatureSpec> specs_;
    std::vector<FieldInfo> fields_;
};

/// Builds a serialized `tf.train.Example` (for tests, benchmarks and `mpistage convert`).
/// Not thread-safe.
class ExampleBuilder {
public:
    /// Adds a bytes feature with one value.
    ExampleBuilder& add_bytes(const std::string& name, const void* data, std::size_t size_bytes);
    /// Adds a bytes feature with several values.
    ExampleBuilder& add_bytes_list(const std::string& name, const std::vector<std::string>& values);
    /// Adds a float feature; `packed` chooses the packed (default) or unpacked wire encoding.
    ExampleBuilder& add_floats(const std::string& name, const std::vector<float>& values,
                               bool packed = true);
    /// Adds an int64 feature; `packed` chooses the packed (default) or unpacked wire encoding.
    ExampleBuilder& add_int64s(const std::string& name, const std::vector<std::int64_t>& values,
                               bool packed = true);
    /// The serialized Example.
    std::vector<std::uint8_t> serialize() const;

private:
    void add_entry(const std::string& name, unsigned kind, const std::vector<std::uint8_t>& list);
    std::vector<std::uint8_t> features_;  // serialized map entries (Features field 1)
};

}  // namespace mpistage
