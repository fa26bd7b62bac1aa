// The user-facing pieces of streams: StreamReader's default skip, CallableStreamSource, and the
// options of a stream loader.
#include <cmath>
#include <sstream>

#include "mpistage/error.hpp"
#include "mpistage/stream.hpp"

namespace mpistage {

std::uint64_t StreamReader::skip(std::uint64_t count) {
    StreamSample discard;
    std::uint64_t n = 0;
    while (n < count && next(discard)) ++n;
    return n;
}

double StreamSource::weight(std::size_t) const {
    return 1.0;
}

std::string StreamSource::unstable_order() const {
    return {};
}

namespace {

constexpr std::uint64_t kFnvBasis = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;

void fnv_bytes(std::uint64_t& h, const std::byte* p, std::uint64_t n) noexcept {
    for (std::uint64_t i = 0; i < 8; ++i) {
        h = (h ^ ((n >> (8 * i)) & 0xff)) * kFnvPrime;
    }
    for (std::uint64_t i = 0; i < n; ++i) h = (h ^ static_cast<std::uint64_t>(p[i])) * kFnvPrime;
}

}  // namespace

std::uint64_t sample_content_hash(const StreamSample& sample) noexcept {
    std::uint64_t h = kFnvBasis;
    for (const auto& f : sample.fields) fnv_bytes(h, f.data(), f.size());
    return h;
}

std::uint64_t sample_content_hash(const HostBatch& batch, std::size_t slot) noexcept {
    std::uint64_t h = kFnvBasis;
    for (const HostField& f : batch.fields()) {
        if (f.info->ragged) {
            const auto begin = static_cast<std::uint64_t>(f.offsets[slot]);
            const auto end = static_cast<std::uint64_t>(f.offsets[slot + 1]);
            fnv_bytes(h, f.data + begin, end - begin);
        } else {
            fnv_bytes(h, f.data + slot * f.info->sample_bytes, f.info->sample_bytes);
        }
    }
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

void StreamOptions::validate() const {
    if (batch_size == 0) throw ConfigError("stream: batch_size must be at least 1");
    if (chunk_size == 0) throw ConfigError("stream: chunk_size must be at least 1");
    if (window_steps == 0) throw ConfigError("stream: window_steps must be at least 1");
    check_timeout(timeout, "stream");
    for (std::size_t i = 1; i < length_buckets.size(); ++i) {
        if (length_buckets[i] <= length_buckets[i - 1]) {
            throw ConfigError("stream: length_buckets must be strictly ascending");
        }
    }
}

std::string StreamOptions::describe() const {
    static const char* const sharding_names[] = {"chunk", "hash", "source"};
    std::ostringstream os;
    os << "sharding=" << sharding_names[static_cast<int>(sharding)] << " chunk_size=" << chunk_size
       << " hash_reading=" << (hash_reading == HashReading::chunks ? "chunks" : "sources")
       << " remainder=" << (remainder == StreamRemainder::rebalance ? "rebalance" : "mask")
       << " batch_size=" << batch_size << " batch_bytes=" << batch_bytes
       << " batch_tokens=" << batch_tokens << " token_field=" << token_field << " length_buckets=";
    for (auto b : length_buckets) os << b << ',';
    os << " timeout=" << timeout.count() << "s window_steps=" << window_steps
       << " window_bytes=" << window_bytes;
    return os.str();
}

}  // namespace mpistage
