#include "mpistage/tf_example.hpp"

#include <cstring>
#include <utility>

#include "mpistage/error.hpp"
#include "sources/tfrecord/example_codec.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the Example decoder copies little-endian wire values as native values");

namespace mpistage {

namespace {

// ---- wire-format reading --------------------------------------------------------------------

struct Span {
    const std::uint8_t* data = nullptr;
    std::size_t size = 0;
};

/// Cursor over one message; every read is bounds-checked and reports failure by returning false.
class Cursor {
public:
    explicit Cursor(Span s) : p_(s.data), end_(s.data + s.size) {}
    bool done() const { return p_ >= end_; }

    bool varint(std::uint64_t& out) {
        out = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p_ >= end_) return false;
            const std::uint8_t b = *p_++;
            out |= static_cast<std::uint64_t>(b & 0x7Fu) << shift;
            if ((b & 0x80u) == 0) return true;
        }
        return false;  // more than 10 bytes
    }
    bool tag(std::uint32_t& field, std::uint32_t& wire) {
        std::uint64_t t = 0;
        if (!varint(t)) return false;
        field = static_cast<std::uint32_t>(t >> 3);
        wire = static_cast<std::uint32_t>(t & 7u);
        return field != 0;
    }
    bool bytes(Span& out) {
        std::uint64_t n = 0;
        if (!varint(n)) return false;
        if (n > static_cast<std::uint64_t>(end_ - p_)) return false;
        out = Span{p_, static_cast<std::size_t>(n)};
        p_ += n;
        return true;
    }
    bool fixed(std::size_t n, const std::uint8_t*& out) {
        if (static_cast<std::size_t>(end_ - p_) < n) return false;
        out = p_;
        p_ += n;
        return true;
    }
    bool skip(std::uint32_t wire) {
        std::uint64_t v = 0;
        const std::uint8_t* f = nullptr;
        Span s;
        switch (wire) {
            case 0:
                return varint(v);
            case 1:
                return fixed(8, f);
            case 2:
                return bytes(s);
            case 5:
                return fixed(4, f);
            default:
                return false;  // groups (3, 4) never appear in Example; 6, 7 are invalid
        }
    }

private:
    const std::uint8_t* p_;
    const std::uint8_t* end_;
};

[[noreturn]] void malformed(const std::string& where, const std::string& what) {
    throw FormatError("tf.train.Example: " + where + ": malformed protobuf (" + what + ")");
}

[[noreturn]] void bad_feature(const std::string& where, const std::string& name,
                              const std::string& what) {
    throw FormatError("tf.train.Example: " + where + ": feature '" + name + "' " + what);
}

std::uint64_t element_count(const std::vector<std::int64_t>& shape) {
    std::uint64_t n = 1;
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
}

/// Finds, for every spec, the last `Feature` message whose key equals its name; appends every
/// key to `keys` when given (to list the features a record has).
void find_features(Span example, const std::vector<FeatureSpec>& specs, std::vector<Span>& found,
                   std::vector<bool>& present, const std::string& where,
                   std::string* keys = nullptr) {
    Cursor ex(example);
    std::uint32_t field = 0;
    std::uint32_t wire = 0;
    while (!ex.done()) {
        if (!ex.tag(field, wire)) malformed(where, "bad tag in Example");
        if (field != 1 || wire != 2) {
            if (!ex.skip(wire)) malformed(where, "bad field in Example");
            continue;
        }
        Span features;
        if (!ex.bytes(features)) malformed(where, "Example.features overruns the record");
        Cursor fs(features);
        while (!fs.done()) {
            if (!fs.tag(field, wire)) malformed(where, "bad tag in Features");
            if (field != 1 || wire != 2) {
                if (!fs.skip(wire)) malformed(where, "bad field in Features");
                continue;
            }
            Span entry;
            if (!fs.bytes(entry)) malformed(where, "Features map entry overruns the record");
            Cursor en(entry);
            Span key;
            Span value;  // a missing value is an empty Feature
            while (!en.done()) {
                if (!en.tag(field, wire)) malformed(where, "bad tag in a Features map entry");
                if (field == 1 && wire == 2) {
                    if (!en.bytes(key)) malformed(where, "map key overruns its entry");
                } else if (field == 2 && wire == 2) {
                    if (!en.bytes(value)) malformed(where, "map value overruns its entry");
                } else if (!en.skip(wire)) {
                    malformed(where, "bad field in a Features map entry");
                }
            }
            if (keys) keys->append(keys->empty() ? "" : ", ").append(key.data, key.data + key.size);
            for (std::size_t i = 0; i < specs.size(); ++i) {
                const auto& name = specs[i].name;
                if (name.size() == key.size &&
                    (key.size == 0 || std::memcmp(name.data(), key.data, key.size) == 0)) {
                    found[i] = value;
                    present[i] = true;
                }
            }
        }
    }
}

/// The list inside a Feature: which kind (last oneof member wins) and its bytes.
bool feature_list(Span feature, FeatureKind& kind, Span& list, bool& has_kind) {
    Cursor c(feature);
    std::uint32_t field = 0;
    std::uint32_t wire = 0;
    has_kind = false;
    while (!c.done()) {
        if (!c.tag(field, wire)) return false;
        if (wire == 2 && field >= 1 && field <= 3) {
            if (!c.bytes(list)) return false;
            kind = field == 1 ? FeatureKind::bytes
                              : (field == 2 ? FeatureKind::float32 : FeatureKind::int64);
            has_kind = true;
        } else if (!c.skip(wire)) {
            return false;
        }
    }
    return true;
}

/// Visits the values of a FloatList/Int64List (packed or not); `fn(index, value_bits)` gets
/// float bits (uint32 in uint64) or int64 bits. Returns the count, or -1 when malformed.
template <class Fn>
std::int64_t visit_numeric(Span list, FeatureKind kind, Fn&& fn) {
    Cursor c(list);
    std::uint32_t field = 0;
    std::uint32_t wire = 0;
    std::int64_t n = 0;
    while (!c.done()) {
        if (!c.tag(field, wire)) return -1;
        if (field != 1) {
            if (!c.skip(wire)) return -1;
            continue;
        }
        if (kind == FeatureKind::float32) {
            if (wire == 5) {
                const std::uint8_t* f = nullptr;
                if (!c.fixed(4, f)) return -1;
                std::uint32_t bits = 0;
                std::memcpy(&bits, f, 4);
                fn(n++, bits);
            } else if (wire == 2) {
                Span packed;
                if (!c.bytes(packed) || packed.size % 4 != 0) return -1;
                for (std::size_t i = 0; i < packed.size; i += 4) {
                    std::uint32_t bits = 0;
                    std::memcpy(&bits, packed.data + i, 4);
                    fn(n++, bits);
                }
            } else {
                return -1;
            }
        } else {
            if (wire == 0) {
                std::uint64_t v = 0;
                if (!c.varint(v)) return -1;
                fn(n++, v);
            } else if (wire == 2) {
                Span packed;
                if (!c.bytes(packed)) return -1;
                Cursor pc(packed);
                while (!pc.done()) {
                    std::uint64_t v = 0;
                    if (!pc.varint(v)) return -1;
                    fn(n++, v);
                }
            } else {
                return -1;
            }
        }
    }
    return n;
}

}  // namespace

ExampleDecoder::ExampleDecoder(std::vector<FeatureSpec> specs) : specs_(std::move(specs)) {
    if (specs_.empty()) throw ConfigError("tf.train.Example decoder: no features declared");
    for (std::size_t i = 0; i < specs_.size(); ++i) {
        auto& s = specs_[i];
        s.validate();
        for (std::size_t j = 0; j < i; ++j) {
            if (specs_[j].name == s.name) {
                throw ConfigError("tf.train.Example decoder: feature '" + s.name +
                                  "' declared twice");
            }
        }
        if (s.kind == FeatureKind::float32) s.dtype = DType::float32;
        if (s.kind == FeatureKind::int64) s.dtype = DType::int64;
        FieldInfo f;
        f.name = s.name;
        f.dtype = s.ragged ? DType::uint8 : s.dtype;
        f.sample_shape = s.shape;
        f.ragged = s.ragged;
        f.sample_bytes =
            s.ragged ? 0 : checked_sample_bytes(s.shape, f.dtype, "feature '" + s.name + "'");
        fields_.push_back(std::move(f));
    }
}

void ExampleDecoder::decode(const std::uint8_t* data, std::size_t size_bytes, BatchSink& sink,
                            std::size_t slot, const std::string& where) const {
    std::vector<Span> found(specs_.size());
    std::vector<bool> present(specs_.size(), false);
    find_features(Span{data, size_bytes}, specs_, found, present, where);
    for (std::size_t i = 0; i < specs_.size(); ++i) {
        const auto& s = specs_[i];
        if (!present[i]) {
            std::string keys;
            find_features(Span{data, size_bytes}, {}, found, present, where, &keys);
            bad_feature(where, s.name, "is missing (the record has: " + keys + ")");
        }
        FeatureKind kind = FeatureKind::bytes;
        Span list;
        bool has_kind = false;
        if (!feature_list(found[i], kind, list, has_kind)) {
            malformed(where, "bad Feature message for '" + s.name + "'");
        }
        if (!has_kind) bad_feature(where, s.name, "holds no value list");
        if (kind != s.kind) {
            bad_feature(where, s.name,
                        "is a " + to_string(kind) + " list, declared " + to_string(s.kind));
        }
        if (s.kind == FeatureKind::bytes) {
            Cursor c(list);
            std::uint32_t field = 0;
            std::uint32_t wire = 0;
            Span value;
            std::size_t values = 0;
            while (!c.done()) {
                if (!c.tag(field, wire)) malformed(where, "bad tag in BytesList '" + s.name + "'");
                if (field == 1 && wire == 2) {
                    if (!c.bytes(value)) malformed(where, "BytesList value overruns the record");
                    ++values;
                } else if (!c.skip(wire)) {
                    malformed(where, "bad field in BytesList '" + s.name + "'");
                }
            }
            if (values != 1) {
                bad_feature(where, s.name,
                            "holds " + std::to_string(values) + " bytes values, expected 1");
            }
            if (s.ragged) {
                std::byte* dst = sink.ragged(i, slot, value.size);
                if (value.size > 0) std::memcpy(dst, value.data, value.size);
            } else {
                if (value.size != fields_[i].sample_bytes) {
                    bad_feature(where, s.name,
                                "holds " + std::to_string(value.size) + " bytes, expected " +
                                    std::to_string(fields_[i].sample_bytes) + " (" +
                                    dtype_name(s.dtype) + " of the declared shape)");
                }
                std::byte* dst = sink.fixed(i, slot);
                if (value.size > 0) std::memcpy(dst, value.data, value.size);
            }
            continue;
        }
        const std::uint64_t expected = element_count(s.shape);
        const std::int64_t n = visit_numeric(list, s.kind, [](std::int64_t, std::uint64_t) {});
        if (n < 0) malformed(where, "bad " + to_string(s.kind) + " list '" + s.name + "'");
        if (static_cast<std::uint64_t>(n) != expected) {
            bad_feature(
                where, s.name,
                "holds " + std::to_string(n) + " values, expected " + std::to_string(expected));
        }
        std::byte* dst = sink.fixed(i, slot);
        if (s.kind == FeatureKind::float32) {
            visit_numeric(list, s.kind, [dst](std::int64_t k, std::uint64_t bits) {
                const auto b = static_cast<std::uint32_t>(bits);
                std::memcpy(dst + 4 * k, &b, 4);
            });
        } else {
            visit_numeric(list, s.kind, [dst](std::int64_t k, std::uint64_t bits) {
                std::memcpy(dst + 8 * k, &bits, 8);
            });
        }
    }
}

}  // namespace mpistage
