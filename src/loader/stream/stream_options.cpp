// The options of a stream loader, and the content hash of a slot of the batches it yields (the
// loader-level half of `sample_content_hash`; the sample's half is with the stream sources).
#include <sstream>

#include "mpistage/error.hpp"
#include "mpistage/stream.hpp"
#include "sources/stream/content_hash.hpp"

namespace mpistage {

std::uint64_t sample_content_hash(const HostBatch& batch, std::size_t slot) noexcept {
    std::uint64_t h = detail::kContentHashBasis;
    for (const HostField& f : batch.fields()) {
        if (f.info->ragged) {
            const auto begin = static_cast<std::uint64_t>(f.offsets[slot]);
            const auto end = static_cast<std::uint64_t>(f.offsets[slot + 1]);
            detail::content_hash_field(h, f.data + begin, end - begin);
        } else {
            detail::content_hash_field(h, f.data + slot * f.info->sample_bytes,
                                       f.info->sample_bytes);
        }
    }
    return h;
}

void StreamOptions::validate() const {
    if (batch_size == 0) throw ConfigError("stream: batch_size must be at least 1");
    if (chunk_size == 0) throw ConfigError("stream: chunk_size must be at least 1");
    if (window_steps == 0) throw ConfigError("stream: window_steps must be at least 1");
    check_timeout(timeout, "stream");
    if (prefetch == 0 || prefetch > kMaxPrefetch) {
        throw ConfigError("stream: prefetch must be in [1, " + std::to_string(kMaxPrefetch) +
                          "], not " + std::to_string(prefetch));
    }
    if (io_threads > kMaxIoThreads) {
        throw ConfigError("stream: io_threads must be at most " + std::to_string(kMaxIoThreads) +
                          ", not " + std::to_string(io_threads));
    }
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
       << " window_bytes=" << window_bytes << " prefetch=" << prefetch
       << " io_threads=" << io_threads;
    return os.str();
}

}  // namespace mpistage
