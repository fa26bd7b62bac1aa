#pragma once
/// @file
/// Streams: samples of unknown count produced by the user's code (a database cursor, cameras, a
/// generator), sharded across ranks by chunk, key hash or sub-stream, batched with equal steps on
/// every rank. `StreamLoader` is the streaming counterpart of `Loader`; its batches are the same
/// `HostBatch` type, so a trainer consumes both the same way.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/source.hpp"
#include "mpistage/stream_source.hpp"

namespace mpistage {

/// Local: the hash of slot `slot` of a batch a `StreamLoader` yielded, equal to
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
    /// Rank mix64(key) mod W owns the item; the rank that read it forwards it with MPI.
    hash,
    /// Whole streams are assigned to ranks, balanced by `StreamSource::weight`.
    source,
};

/// How `hash` reads before it forwards: who reads which item of a stream.
enum class HashReading {
    chunks,   ///< as `chunk` (every rank walks every stream, reads its own chunks)
    sources,  ///< as `source` (one rank reads a whole stream)
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

/// Options of a stream loader; every field must be equal on every rank (checked).
struct StreamOptions {
    StreamSharding sharding = StreamSharding::chunk;
    /// Items per chunk (K) of `chunk` sharding and of `HashReading::chunks`.
    std::uint64_t chunk_size = 64;
    HashReading hash_reading = HashReading::chunks;
    StreamRemainder remainder = StreamRemainder::rebalance;
    /// Largest number of samples in a batch; with no budget below, every batch has exactly
    /// this many slots (padding slots masked).
    std::uint64_t batch_size = 32;
    /// Byte budget of a batch (payload bytes of all fields); 0 = off. A batch holds as many
    /// samples as fit; a single sample larger than the budget forms a batch of its own, flagged
    /// `StreamLoader::last_oversize()`.
    std::uint64_t batch_bytes = 0;
    /// Token budget of a batch: samples × longest sample of ragged field `token_field`, in
    /// elements (what a trainer padding to the longest sample computes on); 0 = off.
    std::uint64_t batch_tokens = 0;
    /// Index (in `fields()`) of the ragged field whose length counts as tokens.
    std::size_t token_field = 0;
    /// Optional length buckets: ascending upper bounds of a sample's length (tokens with a
    /// token budget, else bytes); a batch takes samples from one bucket only (the fullest), so
    /// similar lengths are batched together and padding shrinks.
    std::vector<std::uint64_t> length_buckets;
    /// Watchdog deadline of the loader's collectives (see `Communicator`); 0 disables.
    std::chrono::seconds timeout{300};
    /// Steps per agreement: before agreeing, each rank reads ahead until its queue holds this
    /// many full batches (or `window_bytes`, or its streams end); the ranks then agree once
    /// and yield as many steps as the rank with the fewest full batches holds without any
    /// collective. Ranks so run decoupled between agreements (one per step made every rank
    /// wait for the slowest at every batch, ≈ 1–2 ms a step on a loaded machine). With `hash`
    /// a rank reads `window_steps` batches' rows ahead and routes them to their owners in one
    /// exchange (as many come back as leave, on average), so a window costs one exchange and
    /// one agreement instead of one of each per step. 1 agrees at every step. Exactly-once
    /// and the number of steps are the same for every value, and so is the step at which a
    /// read error is thrown (under `hash`, where a row read ahead leaves its reader at once,
    /// within `window_steps` steps of it; every rank throws the same error naming the row). Larger
    /// windows queue more samples (each an allocation): with 10^6 rows of 16 B at batch 1024, 4
    /// cost the least CPU per rank on the development machine (16 waited less but cost more in
    /// cache misses; benchmarks/README.md).
    std::uint64_t window_steps = 4;
    /// Payload bytes a rank reads ahead for a window at most (a full batch is always read).
    std::uint64_t window_bytes = std::uint64_t{64} << 20;
    /// Batches' worth of items (`batch_size` each; at most `window_bytes` in all) that I/O
    /// threads read ahead of the loader, while the trainer computes, beyond what the window
    /// holds. Used with `io_threads` ≥ 1; 1 ≤ prefetch ≤ kMaxPrefetch.
    std::uint64_t prefetch = 2;
    /// I/O threads that read this rank's streams ahead (`prefetch`): stream i of the rank by
    /// thread i mod T, at most one per stream the rank reads, so a source's readers must only
    /// tolerate being called from a thread other than the one that opened them (one at a time
    /// per reader). 0 (the default): read on the caller's thread inside `next()` (a Python
    /// iterable that must stay on its thread, e.g. a `sqlite3` connection). The items, their
    /// order, the batches and the step at which a read error is thrown are the same for every
    /// value; ≤ kMaxIoThreads.
    std::size_t io_threads = 0;

    /// Local. @throws ConfigError for a zero batch, chunk or window size, a negative timeout,
    ///         unsorted buckets, or `prefetch` / `io_threads` out of range.
    void validate() const;
    /// Local: the options as text, "field=value" separated by spaces (`batch_bytes=0 ...`;
    /// the loader compares them across ranks field by field).
    std::string describe() const;
};

/// Position of one sub-stream in a saved state: positions below `next` were consumed, except
/// those inside `pending` ranges ([begin, end) pairs, ascending), which are still to come.
struct StreamPosition {
    std::uint64_t next = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> pending;
};

/// Where a stream loader stands, identical on every rank (see `StreamLoader::state`).
struct StreamState {
    static constexpr int kVersion = 1;
    int version = kVersion;
    /// Hash of the source's fingerprint and the options that decide who owns what.
    std::string fingerprint;
    /// Steps every rank has yielded.
    std::uint64_t steps = 0;
    /// Valid samples yielded by all ranks together.
    std::uint64_t delivered = 0;
    /// One entry per sub-stream.
    std::vector<StreamPosition> streams;

    /// Local: the state as a JSON document.
    std::string to_json() const;
    /// Local: parses `to_json`'s output. @throws FormatError when the text is not a stream
    /// state; ConfigError naming the key, its value and the expected range when a key is
    /// missing or a number is negative, fractional or too large (never wrapped).
    static StreamState from_json(const std::string& text);
};

/// This rank's counters.
struct StreamStats {
    std::uint64_t batches = 0;
    std::uint64_t valid_samples = 0;
    /// Slots flagged padding (valid = 0) in this rank's batches.
    std::uint64_t padding_slots = 0;
    /// Payload bytes of the valid samples.
    std::uint64_t payload_bytes = 0;
    /// With a token budget: tokens of the valid samples, and the padding a trainer padding each
    /// batch to its longest sample would add (padding waste = padding / (tokens + padding)).
    std::uint64_t tokens = 0;
    std::uint64_t padding_tokens = 0;
    /// Batches made of one sample larger than the budget.
    std::uint64_t oversize_batches = 0;
    /// Items this rank read from its streams (including items forwarded to others).
    std::uint64_t items_read = 0;
    /// Items this rank sent to another rank (`hash` routing and `rebalance`).
    std::uint64_t items_sent = 0;
    /// Rounds of agreement beyond one per step (reading more for dry ranks or for routing).
    std::uint64_t extra_rounds = 0;
    /// Agreements (one allgather each) this rank took part in, extra rounds included; with
    /// `window_steps` > 1 usually far fewer than the steps.
    std::uint64_t agreements = 0;
    /// Time spent inside the loader's collectives (waiting for the other ranks included).
    std::chrono::duration<double> wait_peers_time{0};
    /// Time `next()` waited for the I/O threads to read an item (0 without them).
    std::chrono::duration<double> wait_io_time{0};
    /// I/O threads that read this pass ahead (`StreamOptions::io_threads`, at most one per
    /// stream this rank reads; 0: read on the caller's thread).
    std::size_t io_threads = 0;
};

/// Stages a `StreamSource` across the ranks of a communicator. Every `next()` is collective
/// (every rank calls it equally often): ranks agree (one small allgather, once per window of
/// steps that every rank holds full batches for, see `StreamOptions::window_steps`) whether
/// anyone still holds items, whether anyone failed and who is short, so all ranks yield the
/// same number of steps, nothing hangs when one stream runs
/// dry first, every item is yielded by exactly one rank, and an error in any rank's stream is
/// thrown on every rank. After each agreement the ranks announce the ids they yield at the
/// agreed steps (one allgatherv), so `state()` is local. Item ids (`HostBatch::index`) are
/// `(stream << 40) | position`.
/// Not thread-safe: one thread drives a loader. The source must outlive the loader.
class StreamLoader {
public:
    class EpochBatches;

    /// Collective over `comm` (a `Communicator` or a plain `MPI_Comm`, see `CommRef`; borrowed,
    /// the loader keeps its own duplicate, its one `MPI_Comm_dup`). Checks options,
    /// fields and stream count across ranks, opens this rank's streams, and with `resume`
    /// continues where that state stopped (its fingerprint must match). @throws ConfigError,
    /// any error of the source's `open`, MpiError; identical on every rank.
    StreamLoader(CommRef comm, const StreamSource& source, StreamOptions options,
                 const StreamState* resume = nullptr);
    ~StreamLoader();
    StreamLoader(const StreamLoader&) = delete;
    StreamLoader& operator=(const StreamLoader&) = delete;

    /// Collective: the next batch, or false on every rank once no rank holds items. Batches
    /// hold `batch_size` slots without a budget, else 1..batch_size. @throws the same Error on
    /// every rank when any rank's stream threw (again on later calls).
    bool next(HostBatch& out);
    /// The batches of epoch `epoch`, to iterate as a `Loader`'s: `for (auto& batch :
    /// loader.epoch(e))`. An epoch is one pass over every stream. The first call (any number)
    /// iterates the pass the loader was made for (from the resumed state when it was given
    /// one); calling it again with the same number continues that pass; a different number
    /// starts a new pass from the first sample of every stream (collective: every rank reopens
    /// its streams; what remained of the previous pass is dropped, and `steps()` starts at 0).
    /// Every rank must iterate the same epochs; each increment calls `next()` (collective).
    /// @throws what the source's `open` throws, identical on every rank.
    EpochBatches epoch(std::uint64_t epoch);
    /// The number of the current pass (the last `epoch()` argument; 0 before the first call).
    std::uint64_t current_epoch() const noexcept { return epoch_; }
    /// True when the last batch is a single sample over the byte or token budget.
    bool last_oversize() const noexcept;
    /// Steps yielded so far (equal on every rank; starts at the resumed state's steps).
    std::uint64_t steps() const noexcept;
    /// Local (not collective, as `Loader::state`): where the loader stands (between steps),
    /// identical on every rank, so a trainer may call it on rank 0 alone. Every rank knows what
    /// every rank yields at each step: the ranks announce the ids of the steps they agreed
    /// (one allgatherv per agreement, of the item ids as runs). A loader made with this state
    /// (same source, options, any world size) yields exactly the items not yet yielded.
    /// O(pending ranges) time. Not thread-safe against a concurrent `next()`.
    StreamState state() const;
    const StreamStats& stats() const noexcept;
    const StreamOptions& options() const noexcept;
    const Communicator& comm() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::uint64_t epoch_ = 0;
    bool epoch_started_ = false;
};

/// The batches of one pass of a `StreamLoader` (see `StreamLoader::epoch`): an input range whose
/// increments call `StreamLoader::next`. Single consumer; must not outlive its loader.
class StreamLoader::EpochBatches {
public:
    explicit EpochBatches(StreamLoader& loader) noexcept : loader_(&loader) {}
    /// Collective: the next batch of the pass, or false at its end (as `StreamLoader::next`).
    bool next(HostBatch& out) { return loader_->next(out); }

    /// Input iterator; `++` makes one collective step.
    class iterator {
    public:
        using value_type = HostBatch;
        iterator() = default;
        explicit iterator(StreamLoader* loader) : loader_(loader) { advance(); }
        HostBatch& operator*() noexcept { return current_; }
        HostBatch* operator->() noexcept { return &current_; }
        iterator& operator++() {
            advance();
            return *this;
        }
        bool operator==(const iterator& other) const noexcept { return loader_ == other.loader_; }
        bool operator!=(const iterator& other) const noexcept { return !(*this == other); }

    private:
        void advance() {
            if (loader_ != nullptr && !loader_->next(current_)) loader_ = nullptr;
        }
        StreamLoader* loader_ = nullptr;
        HostBatch current_;
    };
    /// Collective: fetches the first batch.
    iterator begin() { return iterator(loader_); }
    iterator end() noexcept { return iterator(); }

private:
    StreamLoader* loader_;
};

/// Item id of position `position` of stream `stream` (as in `HostBatch::index`).
constexpr std::int64_t stream_item_id(std::uint64_t stream, std::uint64_t position) noexcept {
    return static_cast<std::int64_t>((stream << 40) | position);
}

}  // namespace mpistage
