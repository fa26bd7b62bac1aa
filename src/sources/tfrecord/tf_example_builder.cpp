// tf.train.Example encoding (protobuf wire format) for tests, benchmarks and `mpistage convert`.
#include <cstring>
#include <vector>

#include "mpistage/tf_example.hpp"
#include "sources/tfrecord/example_codec.hpp"

namespace mpistage {

namespace {

void put_varint(std::vector<std::uint8_t>& out, std::uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<std::uint8_t>(v | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<std::uint8_t>(v));
}
void put_tag(std::vector<std::uint8_t>& out, std::uint32_t field, std::uint32_t wire) {
    put_varint(out, (static_cast<std::uint64_t>(field) << 3) | wire);
}
void put_bytes(std::vector<std::uint8_t>& out, std::uint32_t field, const void* data,
               std::size_t n) {
    put_tag(out, field, 2);
    put_varint(out, n);
    const auto* p = static_cast<const std::uint8_t*>(data);
    out.insert(out.end(), p, p + n);
}

}  // namespace

ExampleBuilder& ExampleBuilder::add_bytes(const std::string& name, const void* data,
                                          std::size_t size_bytes) {
    std::vector<std::uint8_t> list;
    put_bytes(list, 1, data, size_bytes);
    add_entry(name, 1, list);
    return *this;
}

ExampleBuilder& ExampleBuilder::add_bytes_list(const std::string& name,
                                               const std::vector<std::string>& values) {
    std::vector<std::uint8_t> list;
    for (const auto& v : values) put_bytes(list, 1, v.data(), v.size());
    add_entry(name, 1, list);
    return *this;
}

ExampleBuilder& ExampleBuilder::add_floats(const std::string& name,
                                           const std::vector<float>& values, bool packed) {
    std::vector<std::uint8_t> list;
    if (packed) {
        put_bytes(list, 1, values.data(), values.size() * 4);
    } else {
        for (float v : values) {
            put_tag(list, 1, 5);
            const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
            list.insert(list.end(), p, p + 4);
        }
    }
    add_entry(name, 2, list);
    return *this;
}

ExampleBuilder& ExampleBuilder::add_int64s(const std::string& name,
                                           const std::vector<std::int64_t>& values, bool packed) {
    std::vector<std::uint8_t> list;
    if (packed) {
        std::vector<std::uint8_t> body;
        for (auto v : values) put_varint(body, static_cast<std::uint64_t>(v));
        put_bytes(list, 1, body.data(), body.size());
    } else {
        for (auto v : values) {
            put_tag(list, 1, 0);
            put_varint(list, static_cast<std::uint64_t>(v));
        }
    }
    add_entry(name, 3, list);
    return *this;
}

void ExampleBuilder::add_entry(const std::string& name, unsigned kind,
                               const std::vector<std::uint8_t>& list) {
    // Feature { oneof kind = list }, then the map entry { key = 1; value = 2 } of Features.
    std::vector<std::uint8_t> feature;
    put_bytes(feature, kind, list.data(), list.size());
    std::vector<std::uint8_t> entry;
    put_bytes(entry, 1, name.data(), name.size());
    put_bytes(entry, 2, feature.data(), feature.size());
    put_bytes(features_, 1, entry.data(), entry.size());
}

std::vector<std::uint8_t> ExampleBuilder::serialize() const {
    std::vector<std::uint8_t> out;
    put_bytes(out, 1, features_.data(), features_.size());
    return out;
}

}  // namespace mpistage
