// Feature specs of the Example decoder: `NAME:TYPE[:SHAPE]` as given on the command line
// (`--feature`), and their validation.
#include "mpistage/tf_example.hpp"

#include <string>
#include <vector>

#include "mpistage/error.hpp"

namespace mpistage {

namespace {

std::vector<std::int64_t> parse_shape(const std::string& s, const std::string& text) {
    std::vector<std::int64_t> shape;
    if (s.empty()) return shape;
    std::size_t pos = 0;
    while (pos <= s.size()) {
        std::size_t next = s.find_first_of("x,", pos);
        if (next == std::string::npos) next = s.size();
        const std::string dim = s.substr(pos, next - pos);
        if (dim.empty() || dim.find_first_not_of("0123456789") != std::string::npos ||
            dim.size() > 12) {
            throw ConfigError("feature spec '" + text + "': bad shape dimension '" + dim +
                              "' (expected e.g. 28x28)");
        }
        shape.push_back(std::stoll(dim));
        pos = next + 1;
    }
    return shape;
}

}  // namespace

std::string to_string(FeatureKind k) {
    switch (k) {
        case FeatureKind::bytes:
            return "bytes";
        case FeatureKind::float32:
            return "float";
        case FeatureKind::int64:
            return "int64";
    }
    return "?";
}

void FeatureSpec::validate() const {
    if (name.empty()) throw ConfigError("feature spec: empty feature name");
    for (auto d : shape) {
        if (d < 0) throw ConfigError("feature '" + name + "': negative dimension in shape");
    }
    if (ragged && (kind != FeatureKind::bytes || !shape.empty())) {
        throw ConfigError("feature '" + name + "': only a bytes feature without shape is ragged");
    }
    if (kind == FeatureKind::bytes && !ragged && dtype == DType::boolean) {
        throw ConfigError("feature '" + name + "': bytes cannot be reinterpreted as boolean");
    }
}

FeatureSpec parse_feature_spec(const std::string& text) {
    FeatureSpec spec;
    const auto c1 = text.find(':');
    if (c1 == std::string::npos || c1 == 0) {
        throw ConfigError("feature spec '" + text + "': expected NAME:TYPE[:SHAPE]");
    }
    spec.name = text.substr(0, c1);
    const auto c2 = text.find(':', c1 + 1);
    const std::string type =
        text.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
    const std::string shape = c2 == std::string::npos ? std::string() : text.substr(c2 + 1);
    if (type == "bytes") {
        spec.kind = FeatureKind::bytes;
        spec.dtype = DType::uint8;
    } else if (type.rfind("bytes/", 0) == 0) {
        spec.kind = FeatureKind::bytes;
        spec.dtype = parse_dtype(type.substr(6));
    } else if (type == "float" || type == "float32") {
        spec.kind = FeatureKind::float32;
        spec.dtype = DType::float32;
    } else if (type == "int64") {
        spec.kind = FeatureKind::int64;
        spec.dtype = DType::int64;
    } else {
        throw ConfigError("feature spec '" + text + "': unknown type '" + type +
                          "' (bytes, float, int64 or bytes/DTYPE)");
    }
    spec.shape = parse_shape(shape, text);
    spec.ragged = spec.kind == FeatureKind::bytes && c2 == std::string::npos;
    if (spec.ragged && spec.dtype != DType::uint8) {
        throw ConfigError("feature spec '" + text + "': bytes/DTYPE needs a SHAPE");
    }
    spec.validate();
    return spec;
}

}  // namespace mpistage
