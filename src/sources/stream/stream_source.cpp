// The stream source interface's defaults (StreamReader::skip and next_kept, StreamSource::weight,
// unstable_order and keys_first), a sample's content hash and CallableStreamSource.
#include "mpistage/stream_source.hpp"

#include <cmath>

#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "sources/stream/content_hash.hpp"

namespace mpistage {

std::uint64_t StreamReader::skip(std::uint64_t count) {
    StreamSample discard;
    std::uint64_t n = 0;
    while (n < count && next(discard)) ++n;
    return n;
}

bool StreamReader::next_kept(StreamSample& out,
                             const std::function<bool(std::uint64_t key)>& keep) {
    while (next(out)) {
        if (keep(out.key)) return true;
    }
    return false;
}

double StreamSource::weight(std::size_t) const {
    return 1.0;
}

std::string StreamSource::unstable_order() const {
    return {};
}

bool StreamSource::keys_first() const {
    return false;
}

std::uint64_t sample_content_hash(const StreamSample& sample) noexcept {
    std::uint64_t h = detail::kContentHashBasis;
    for (const auto& f : sample.fields) detail::content_hash_field(h, f.data(), f.size());
    return h;
}

namespace {

class CallableReader final : public StreamReader {
public:
    explicit CallableReader(CallableStreamSource::Generator g) : g_(std::move(g)) {}
    bool next(StreamSample& out) override { return g_(out); }

private:
    CallableStreamSource::Generator g_;
};

}  // namespace

CallableStreamSource::CallableStreamSource(std::vector<FieldInfo> fields, std::size_t num_streams,
                                           Factory make, std::string fingerprint,
                                           std::vector<double> weights)
    : fields_(std::move(fields)),
      num_streams_(num_streams),
      make_(std::move(make)),
      fingerprint_(std::move(fingerprint)),
      weights_(std::move(weights)) {
    if (!weights_.empty() && weights_.size() != num_streams_) {
        throw ConfigError("stream: " + std::to_string(weights_.size()) + " weights for " +
                          std::to_string(num_streams_) + " streams");
    }
    for (double w : weights_) {
        if (!(w > 0) || !std::isfinite(w)) {
            throw ConfigError("stream: weights must be positive and finite");
        }
    }
    for (auto& f : fields_) {
        if (f.name.empty()) throw ConfigError("stream: a field has no name");
        f.sample_bytes = f.ragged ? 0 : checked_sample_bytes(f.sample_shape, f.dtype, f.name);
    }
    if (!make_) throw ConfigError("stream: no generator factory given");
}

double CallableStreamSource::weight(std::size_t s) const {
    return weights_.empty() ? 1.0 : weights_.at(s);
}

std::unique_ptr<StreamReader> CallableStreamSource::open(std::size_t s) const {
    return std::make_unique<CallableReader>(make_(s));
}

}  // namespace mpistage
