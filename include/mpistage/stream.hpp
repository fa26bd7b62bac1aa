#pragma once
/// @file
/// Streams: samples of unknown count produced by the user's code (a database cursor, cameras, a
/// generator), sharded across ranks by chunk, key hash or sub-stream, batched with equal steps on
/// every rank. A stream is read by the one `Loader` (`Loader(comm, stream_source, options)`,
/// loader.hpp): these are the stream half of its plan options (`LoaderOptions::stream`).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/batch.hpp"
#include "mpistage/stream_source.hpp"

namespace mpistage {

/// Local: the hash of slot `slot` of a batch a stream `Loader` yielded, equal to
/// `sample_content_hash(const StreamSample&)` (stream_source.hpp) of the sample it holds
/// (fixed fields `sample_bytes` bytes, ragged fields their slot's bytes). `slot` must be
/// < `batch.size()`.
std::uint64_t sample_content_hash(const HostBatch& batch, std::size_t slot) noexcept;

/// Which rank yields an item.
enum class StreamSharding {
    /// Each stream is cut into chunks of `chunk_size` items; chunk c of stream s belongs to
    /// rank (c + s) mod W. Every rank walks every stream and skips others' chunks (a cursor
    /// read with fetchmany).
    chunk,
    /// Rank mix64(key) mod W owns the item (`StreamSample::key`); `hash_reading` says who
    /// reads it and whether it is forwarded with MPI.
    hash,
    /// Whole streams are assigned to ranks, balanced by `StreamSource::weight`.
    source,
};

/// How `hash` reads: who reads which item of a stream, and whether items are forwarded.
enum class HashReading {
    /// As `chunk` (every rank walks every stream, reads its own chunks), then forwards each
    /// item to its owner with MPI.
    chunks,
    /// As `source` (one rank reads a whole stream), then forwards each item to its owner.
    sources,
    /// Every rank walks every stream and reads only the items it owns
    /// (`StreamReader::next_kept`): nothing is forwarded. Cheap where a reader finds a key
    /// without the item (`StreamSource::keys_first`, e.g. SQLite's key column); otherwise
    /// every rank reads every item whole.
    keys,
    /// `keys` for a source whose `keys_first()` is true, else `chunks`.
    automatic,
};

/// What happens once some ranks run dry while others still hold items.
enum class StreamRemainder {
    /// Ranks with items left send some to the dry ranks, so batches stay full while possible.
    /// A rank sends its oldest items beyond its own next batch, in the order it read them, so
    /// the items one rank receives from another keep their stream order; with `source`
    /// sharding (one reader per stream) and no `length_buckets` (which reorder by length),
    /// every rank sees each stream's items in stream order.
    rebalance,
    /// Dry ranks yield batches whose slots are padding (`valid = 0`, index −1).
    mask,
};

/// How a `Loader` over a `StreamSource` shares the streams' items among the ranks
/// (`LoaderOptions::stream`; batching, read-ahead and the watchdog are the loader's own
/// options: `PlanOptions::batch_size` or its `budget`, `prefetch`, `io_threads`, `timeout`).
/// Every field must be equal on every rank (checked). Unused by a loader over files.
struct StreamPlanOptions {
    StreamSharding sharding = StreamSharding::chunk;
    /// Items per chunk (K) of `chunk` sharding and of `HashReading::chunks`.
    std::uint64_t chunk_size = 64;
    HashReading hash_reading = HashReading::automatic;
    StreamRemainder remainder = StreamRemainder::rebalance;
    /// Optional length buckets: ascending upper bounds of a sample's length (tokens with a
    /// token budget, else bytes); a batch takes samples from one bucket only (the fullest), so
    /// similar lengths are batched together and padding shrinks.
    std::vector<std::uint64_t> length_buckets;
    /// Steps per agreement: before agreeing, each rank reads ahead until its queue holds this
    /// many full batches (or `window_bytes`, or its streams end); the ranks then agree once
    /// and yield as many steps as the rank with the fewest full batches holds without any
    /// collective. Ranks so run decoupled between agreements (one per step made every rank
    /// wait for the slowest at every batch, about 1-2 ms a step on a loaded machine). With
    /// `hash` a rank reads `window_steps` batches' rows ahead and routes them to their owners
    /// in one exchange, so a window costs one exchange and one agreement instead of one of
    /// each per step. 1 agrees at every step. Exactly-once and the number of steps are the
    /// same for every value, and so is the step at which a read error is thrown (under
    /// `hash`, where a row read ahead leaves its reader at once, within `window_steps` steps
    /// of it; every rank throws the same error naming the row). Larger windows queue more
    /// samples (each an allocation): with 10^6 rows of 16 B at batch 1024, 4 cost the least
    /// CPU per rank on the development machine (benchmarks/README.md).
    std::uint64_t window_steps = 4;
    /// Payload bytes a rank reads ahead for a window at most (a full batch is always read).
    std::uint64_t window_bytes = std::uint64_t{64} << 20;

    /// Local: the options as text, "field=value" separated by spaces (the loader compares
    /// them across ranks field by field).
    std::string describe() const;
};

/// Item id of position `position` of stream `stream` (as in `HostBatch::index`).
constexpr std::int64_t stream_item_id(std::uint64_t stream, std::uint64_t position) noexcept {
    return static_cast<std::int64_t>((stream << 40) | position);
}

}  // namespace mpistage
