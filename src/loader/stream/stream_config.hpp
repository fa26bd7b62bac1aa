#pragma once
// The settings a stream loader runs by, gathered from its LoaderOptions (`stream_config`): the
// stream plan options with the batching, read-ahead and watchdog options that apply to streams.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/loader.hpp"

namespace mpistage::detail {

/// The stream plan options (`LoaderOptions::stream`) with the batching, read-ahead and watchdog
/// settings the stream planner takes from the rest of the loader's options.
struct StreamConfig : StreamPlanOptions {
    /// Largest number of samples in a batch; with no budget every batch has this many slots.
    std::uint64_t batch_size = 32;
    /// `BatchBudget::batch_bytes` / `batch_tokens` / `token_field` (0: off).
    std::uint64_t batch_bytes = 0;
    std::uint64_t batch_tokens = 0;
    std::size_t token_field = 0;
    std::chrono::seconds timeout{300};
    std::uint64_t prefetch = 2;
    std::size_t io_threads = 0;

    /// Local: "field=value" pairs separated by spaces (the stream plan's, then the rest).
    std::string describe() const;
};

/// True when every rank opens every stream and picks its items by position or key (`chunk`,
/// `hash` with `HashReading::chunks` or `keys`): such reading needs the same order on every
/// rank. `hash_reading` must be resolved (not `automatic`).
bool walks_every_stream(const StreamConfig& o);
/// True when a rank forwards the items it reads to their owners (`hash` with `chunks` or
/// `sources` reading).
bool forwards_items(const StreamConfig& o);
/// Name of a `HashReading` value as the options spell it ("chunks", "sources", "keys", "auto").
const char* hash_reading_name(HashReading r);

/// Local: the settings of a loader over streams from its options. @throws ConfigError naming
/// the option for a file-only option set away from its default (a shuffle, global sharding,
/// balance_steps, bucket_window, a memory tier, two-phase reads, verify_files, a `full`
/// fingerprint), a zero batch, chunk or window size, unsorted buckets, or
/// prefetch / io_threads / timeout out of range.
StreamConfig stream_config(const LoaderOptions& options);

/// Local: for a loader over files. @throws ConfigError naming the first `LoaderOptions::stream`
/// field set away from its default (it shares a stream's items; files have no use for it).
void refuse_stream_options(const LoaderOptions& options);

}  // namespace mpistage::detail
