#pragma once
// Clairvoyant read-ahead for `Shuffle::chunks` (docs/shuffle.md, "Read-ahead"): the chunks of
// one rank's epoch read in the order its plan will first need them, each in one large read per
// field (one per file run of records for TFRecord), into memory bounded by the stage budget,
// and freed after their last planned use.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "mpistage/tier.hpp"

namespace mpistage::detail {

/// The most chunk reads in flight at once (threads of one rank's read-ahead). Under the PFS
/// model (1 ms a request) 32 gave 1.8× the rate of 16 with no compute and the same with 1 ms
/// of it; 64 lost 10 % with compute, its threads contending for 2 cores (benchmarks/README.md).
constexpr std::size_t kMaxReaders = 32;

/// One chunk's memory: an anonymous mapping of its own, unmapped when freed, so the process's
/// resident memory follows the chunks held (heap blocks freed by 16 reader threads stay in
/// their malloc arenas: 30 % over the budget in the memory test). Move-only.
class ChunkMemory {
public:
    ChunkMemory() = default;
    /// @throws IoError when the mapping fails (the bytes and errno).
    explicit ChunkMemory(std::size_t bytes);
    ChunkMemory(ChunkMemory&& o) noexcept : data_(o.data_), bytes_(o.bytes_) {
        o.data_ = nullptr;
        o.bytes_ = 0;
    }
    ChunkMemory& operator=(ChunkMemory&& o) noexcept;
    ~ChunkMemory() { reset(); }
    std::byte* data() const noexcept { return data_; }
    /// The bytes mapped: those asked for, rounded up to whole pages (0 once reset).
    std::size_t bytes() const noexcept { return data_ ? bytes_ : 0; }
    /// What a mapping of `bytes` bytes takes: whole pages (0 for 0).
    static std::size_t mapped_size(std::size_t bytes) noexcept;
    void reset() noexcept;

private:
    std::byte* data_ = nullptr;
    std::size_t bytes_ = 0;
};

/// Mappings for chunks' rows kept between chunks and epochs instead of unmapped: a new mapping's
/// pages fault in and are zeroed on first touch, and unmapping one flushes the TLB (together a
/// quarter of the process's CPU on 11 KB chunks, by `perf`). A free mapping is reused for a
/// chunk of exactly its size (all chunks but an epoch's tail chunk have one size). Holds free
/// mappings only while they and the chunks in use (`in_use`, passed by the caller) stay
/// within `limit` bytes, so the memory of the pool and the chunks read ahead is bounded by the
/// budget. Thread-safe.
class ChunkPool {
public:
    explicit ChunkPool(std::uint64_t limit) : limit_(limit) {}
    /// A free mapping of exactly `bytes` bytes, or a new one, for which free mappings are
    /// unmapped until they and `in_use` bytes (the chunks in use, this one included) fit the
    /// limit. @throws IoError (ChunkMemory).
    ChunkMemory take(std::size_t bytes, std::uint64_t in_use);
    /// Keeps `memory` for reuse if the free bytes, it and `in_use` bytes fit the limit; else
    /// unmaps it.
    void give(ChunkMemory memory, std::uint64_t in_use);
    /// Free bytes held.
    std::uint64_t free_bytes() const;

private:
    mutable std::mutex m_;
    std::vector<ChunkMemory> free_;
    std::uint64_t free_bytes_ = 0;
    std::uint64_t limit_;
};

/// The samples of one rank's epoch as a `Source`, served from chunks of `chunk_samples`
/// contiguous ids read ahead by `threads` background threads (NoPFS's clairvoyant
/// prefetching, Dryden et al., SC'21: the access order is known before the epoch starts).
/// The depth adapts: each time a read has to wait for its chunk, one more reader thread
/// (chunk in flight) is added, up to kMaxReaders, within the budget.
/// The plan's slot ids give each chunk's first use (the reading order) and its number of
/// uses; a chunk is freed once every planned read of it was served, and a chunk is read only
/// while the resident bytes stay within `budget_bytes` (unless a read waits for it).
/// Fields of fixed size are held as rows back to back; fields of varying size (TFRecord
/// payloads, ragged Example features) as values in mappings of the chunk's own, a chunk
/// charged the source's `sample_bytes` of its samples before its read and the bytes it holds
/// after it. `read` is thread-safe and independent (no MPI); construction starts the threads,
/// destruction stops and joins them. Borrows `source`.
class ChunkReadAhead final : public Source {
public:
    /// Whether `source` can be read this way (it has fields).
    static bool supports(const Source& source);
    /// `plan`: this rank's plan of the epoch (its slot ids are the planned reads, in order);
    /// `steps`: the steps of it the range yields (an early end reads no chunk beyond them).
    /// `timeout`: the longest a read waits for its chunk (then an IoError naming it).
    /// @throws std::system_error when not even one reader thread starts.
    /// `pool`: where the rows' mappings come from and go back to (shared by the loader's
    /// epochs; its free bytes count against `budget_bytes`).
    ChunkReadAhead(const Source& source, const EpochPlan& plan, std::uint64_t steps,
                   std::uint64_t chunk_samples, std::uint64_t budget_bytes, std::size_t threads,
                   std::chrono::seconds timeout, std::shared_ptr<ChunkPool> pool);
    ~ChunkReadAhead() override;
    ChunkReadAhead(const ChunkReadAhead&) = delete;
    ChunkReadAhead& operator=(const ChunkReadAhead&) = delete;

    const std::vector<FieldInfo>& fields() const override { return source_.fields(); }
    std::uint64_t num_samples() const override { return source_.num_samples(); }
    std::uint64_t records_in_cut(int rank, int world_size) const override {
        return source_.records_in_cut(rank, world_size);
    }
    std::string fingerprint() const override { return source_.fingerprint(); }
    std::uint64_t sample_bytes(std::uint64_t id) const override { return source_.sample_bytes(id); }
    /// Copies each sample from its chunk (waiting for it to be read). An id the plan did not
    /// list (a retry) is read from the source directly. @throws the chunk read's error
    /// (IoError, FormatError, Hdf5Error naming file and offset), or IoError after `timeout`.
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override;
    /// This epoch's counters so far (LoaderStats::read_ahead sums the epochs').
    ReadAheadCounters stats() const;

private:
    /// One sample's value of a field of varying size, in one of the chunk's mappings.
    struct Span {
        const std::byte* data = nullptr;
        std::uint64_t bytes = 0;
    };
    struct Chunk {
        std::uint64_t first = 0;  // first id
        std::uint64_t count = 0;  // ids in the chunk
        std::uint64_t uses = 0;   // planned reads not served yet
        std::uint64_t bytes = 0;  // charged to the budget (an estimate until read)
        std::size_t order = 0;    // index in the reading order
        enum class State { waiting, reading, resident, freed } state = State::waiting;
        ChunkMemory memory;               // the fixed fields' rows, field after field
        std::vector<ChunkMemory> values;  // the values of fields of varying size
        std::vector<Span> spans;          // row-major: row · ragged fields + ragged field
        std::exception_ptr error;
    };
    class Sink;
    void reader() const;
    /// The bytes a chunk of `count` samples from `first` is charged before its read.
    std::uint64_t estimate_bytes(std::uint64_t first, std::uint64_t count) const;

    const Source& source_;
    std::shared_ptr<ChunkPool> pool_;
    std::uint64_t chunk_samples_;
    std::uint64_t budget_;
    std::chrono::seconds timeout_;
    std::uint64_t row_bytes_ = 0;            // the fixed fields' bytes of one sample
    std::vector<std::size_t> ragged_index_;  // per field: its index among the ragged, or npos
    std::size_t ragged_fields_ = 0;
    mutable std::mutex m_;
    // Readers wait on `reader_cv_` (for budget, the progress rule or the stop), woken one at a
    // time as budget frees (each taker wakes the next while chunks fit): a wake-up of every
    // reader per freed chunk was a third of a rank's CPU in context switches. Reads served
    // from the chunks wait on `ready_cv_` (a chunk resident).
    mutable std::condition_variable reader_cv_;
    mutable std::condition_variable ready_cv_;
    mutable std::unordered_map<std::uint64_t, Chunk> chunks_;  // by chunk number
    std::vector<std::uint64_t> order_;                         // chunk numbers, first use
    mutable std::size_t next_ = 0;                             // next in order_ to read
    mutable std::multiset<std::size_t> waiting_;  // orders of the chunks reads wait for
    mutable std::uint64_t resident_ = 0;
    bool stop_ = false;
    mutable ReadAheadCounters stats_;
    mutable std::vector<std::thread> threads_;  // grows in `read` (under m_)
};

}  // namespace mpistage::detail
