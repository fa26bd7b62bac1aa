// The options of a loader over streams (StreamPlanOptions, and the settings gathered from
// LoaderOptions), and the content hash of a slot of the batches it yields (the loader-level half
// of `sample_content_hash`; the sample's half is with the stream sources).
#include <sstream>

#include "loader/stream/stream_config.hpp"
#include "mpistage/error.hpp"
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

namespace {

const char* sharding_name(StreamSharding s) {
    switch (s) {
        case StreamSharding::chunk:
            return "chunk";
        case StreamSharding::hash:
            return "hash";
        case StreamSharding::source:
            return "source";
    }
    return "chunk";
}

/// ConfigError for a file-only option `name` set to `value` on a loader over streams.
[[noreturn]] void file_only(const std::string& name, const std::string& value,
                            const std::string& why) {
    throw ConfigError("stream loader: option " + name + " = " + value + " " + why +
                      "; leave it at its default for a StreamSource");
}

}  // namespace

std::string StreamPlanOptions::describe() const {
    std::ostringstream os;
    os << "sharding=" << sharding_name(sharding) << " chunk_size=" << chunk_size
       << " hash_reading=" << detail::hash_reading_name(hash_reading)
       << " remainder=" << (remainder == StreamRemainder::rebalance ? "rebalance" : "mask")
       << " length_buckets=";
    for (auto b : length_buckets) os << b << ',';
    os << " window_steps=" << window_steps << " window_bytes=" << window_bytes;
    return os.str();
}

namespace detail {

const char* hash_reading_name(HashReading r) {
    switch (r) {
        case HashReading::chunks:
            return "chunks";
        case HashReading::sources:
            return "sources";
        case HashReading::keys:
            return "keys";
        case HashReading::automatic:
            return "auto";
    }
    return "auto";
}

bool walks_every_stream(const StreamConfig& o) {
    return o.sharding == StreamSharding::chunk ||
           (o.sharding == StreamSharding::hash && o.hash_reading != HashReading::sources);
}

bool forwards_items(const StreamConfig& o) {
    return o.sharding == StreamSharding::hash && o.hash_reading != HashReading::keys;
}

std::string StreamConfig::describe() const {
    std::ostringstream os;
    os << StreamPlanOptions::describe() << " batch_size=" << batch_size
       << " batch_bytes=" << batch_bytes << " batch_tokens=" << batch_tokens
       << " token_field=" << token_field << " timeout=" << timeout.count()
       << "s prefetch=" << prefetch << " io_threads=" << io_threads;
    return os.str();
}

void refuse_stream_options(const LoaderOptions& o) {
    std::istringstream given(o.stream.describe());
    std::istringstream defaults(StreamPlanOptions{}.describe());
    for (std::string g, d; given >> g && defaults >> d;) {
        if (g == d) continue;
        const auto eq = g.find('=');
        throw ConfigError("loader: option stream." + g.substr(0, eq) + " = " + g.substr(eq + 1) +
                          " shares a stream's items among the ranks; a loader over files has no "
                          "use for it (leave it at its default, or read a StreamSource)");
    }
}

StreamConfig stream_config(const LoaderOptions& o) {
    o.validate();
    // What a stream has no use for is refused by name, never accepted and ignored.
    const PlanOptions& p = o.plan;
    const char* unordered =
        "orders files by sample id; a stream's items come in the order "
        "its readers produce them";
    if (p.shuffle != Shuffle::none) {
        file_only("plan.shuffle", to_string(p.shuffle),
                  std::string(unordered) +
                      " (shuffle in the stream's producer, e.g. SQL "
                      "ORDER BY a hash of the key)");
    }
    if (p.sharding != Sharding::byte_range) {
        file_only("plan.sharding", to_string(p.sharding),
                  std::string(unordered) + " (stream.sharding shares them)");
    }
    if (p.remainder != Remainder::drop) {
        file_only("plan.remainder", to_string(p.remainder),
                  "is the file remainder; a stream's dry ranks follow stream.remainder "
                  "(rebalance or mask)");
    }
    if (p.seed != 0) file_only("plan.seed", std::to_string(p.seed), "seeds file shuffles");
    if (p.balance_steps) file_only("plan.balance_steps", "true", "balances planned file steps");
    if (p.budget.bucket_window > 1) {
        file_only("plan.budget.bucket_window", std::to_string(p.budget.bucket_window),
                  "buckets a planned file epoch (streams bucket by stream.length_buckets)");
    }
    if (o.tier.stage != Stage::none) {
        file_only("stage", to_string(o.tier.stage), "stages files into node memory");
    }
    if (o.tier.stage_budget_bytes != 0) {
        file_only("stage_budget_bytes", std::to_string(o.tier.stage_budget_bytes),
                  "bounds the memory tier of files");
    }
    if (o.tier.stage_ranks_per_node != 0) {
        file_only("stage_ranks_per_node", std::to_string(o.tier.stage_ranks_per_node),
                  "shapes the memory tier of files");
    }
    if (o.tier.stage_read != StageRead::automatic) {
        file_only("stage_read", to_string(o.tier.stage_read), "says how files are staged");
    }
    if (o.pipeline.two_phase != TwoPhase::off) {
        file_only("two_phase", to_string(o.pipeline.two_phase), "reads file slabs by sample id");
    }
    if (o.safety.verify_files) file_only("verify_files", "true", "compares the files across ranks");
    if (o.safety.fingerprint != FingerprintLevel::sampled) {
        file_only("fingerprint", to_string(o.safety.fingerprint),
                  "hashes file samples (a stream's fingerprint is its source's)");
    }
    if (o.safety.accept_legacy_state) {
        file_only("accept_legacy_state", "true", "admits old file states");
    }
    if (p.budget.active() && p.batch_size != PlanOptions{}.batch_size &&
        p.batch_size != p.budget.max_batch_samples) {
        throw ConfigError("stream loader: plan.batch_size = " + std::to_string(p.batch_size) +
                          " with a batch budget: the budget sizes the batches; their largest "
                          "count is plan.budget.max_batch_samples");
    }
    StreamConfig c;
    static_cast<StreamPlanOptions&>(c) = o.stream;
    c.batch_size = p.budget.active() ? p.budget.max_batch_samples : p.batch_size;
    c.batch_bytes = p.budget.batch_bytes;
    c.batch_tokens = p.budget.batch_tokens;
    c.token_field = p.budget.token_field;
    c.timeout = o.safety.timeout;
    c.prefetch = o.pipeline.prefetch;
    c.io_threads = o.pipeline.io_threads;
    if (c.batch_size == 0) {
        throw ConfigError(p.budget.active()
                              ? "stream loader: plan.budget.max_batch_samples must be at least 1"
                              : "stream loader: plan.batch_size must be at least 1");
    }
    if (c.chunk_size == 0) throw ConfigError("stream loader: stream.chunk_size must be at least 1");
    if (c.window_steps == 0) {
        throw ConfigError("stream loader: stream.window_steps must be at least 1");
    }
    for (std::size_t i = 1; i < c.length_buckets.size(); ++i) {
        if (c.length_buckets[i] <= c.length_buckets[i - 1]) {
            throw ConfigError("stream loader: stream.length_buckets must be strictly ascending");
        }
    }
    return c;
}

}  // namespace detail

}  // namespace mpistage
