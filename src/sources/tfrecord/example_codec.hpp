#pragma once
// The decoder (and encoder, for tests, benchmarks and IDX conversion) of the protobuf wire
// format of `tf.train.Example` (tensorflow/core/example/example.proto, feature.proto);
// internal, not installed:
//
//     Example  { Features features = 1; }
//     Features { map<string, Feature> feature = 1; }
//     (map entry: { string key = 1; Feature value = 2; })
//     Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
//                             Int64List int64_list = 3; } }
//     BytesList { repeated bytes value = 1; }
//     FloatList { repeated float value = 1 [packed = true]; }
//     Int64List { repeated int64 value = 1 [packed = true]; }
//
// Packed and unpacked repeated fields are both accepted; when a key repeats, the last entry
// wins (protobuf map semantics). Unknown fields are skipped. There is no protobuf dependency.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/source.hpp"
#include "mpistage/tf_example.hpp"

namespace mpistage {

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
