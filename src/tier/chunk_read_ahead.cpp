// Clairvoyant chunk read-ahead (see chunk_read_ahead.hpp).
#include "tier/chunk_read_ahead.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// Ids per source read of a chunk: 512 KiB of ids at most.
constexpr std::uint64_t kIdsPerRead = 65536;

/// Where each field's rows start in a chunk of `count` rows.
std::vector<std::uint64_t> field_offsets(const std::vector<FieldInfo>& fields,
                                         std::uint64_t count) {
    std::vector<std::uint64_t> out;
    std::uint64_t at = 0;
    for (const FieldInfo& f : fields) {
        out.push_back(at);
        at += count * f.sample_bytes;
    }
    return out;
}

/// Slot `k + slot` of another sink: a one-sample read straight from the source.
class OffsetSink final : public BatchSink {
public:
    OffsetSink(BatchSink& s, std::size_t k) : s_(s), k_(k) {}
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        return s_.fixed(field, k_ + slot);
    }
    std::byte* ragged(std::size_t field, std::size_t slot, std::uint64_t size_bytes) override {
        return s_.ragged(field, k_ + slot, size_bytes);
    }

private:
    BatchSink& s_;
    std::size_t k_;
};

/// The first mapping for a chunk's values of varying size is its estimate; one that runs out
/// is followed by another of at least this many bytes (or the value's size).
constexpr std::uint64_t kMinValueBlock = 64 * 1024;

}  // namespace

/// Where a source read of chunk rows writes: the fixed fields' rows back to back, field after
/// field (field f at `offsets[f]`), and each value of a field of varying size in the chunk's
/// value mappings, appended (a mapping never moves, so each value's span stays valid).
class ChunkReadAhead::Sink final : public BatchSink {
public:
    Sink(const ChunkReadAhead& owner, std::byte* rows, const std::vector<std::uint64_t>& offsets,
         std::vector<ChunkMemory>& values, std::vector<Span>& spans, std::uint64_t estimate)
        : owner_(owner),
          rows_(rows),
          offsets_(offsets),
          values_(values),
          spans_(spans),
          next_block_(std::max<std::uint64_t>(estimate, 1)) {}
    /// Slot 0 of the next source read is chunk row `row`.
    void start_at(std::uint64_t row) noexcept { first_ = row; }
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        return rows_ + offsets_[field] +
               (first_ + slot) * owner_.source_.fields()[field].sample_bytes;
    }
    std::byte* ragged(std::size_t field, std::size_t slot, std::uint64_t size_bytes) override {
        const std::size_t r = owner_.ragged_index_.at(field);
        if (r == kFixed) {
            throw FormatError("chunk read-ahead: field '" + owner_.source_.fields()[field].name +
                              "' of fixed size was written as one of varying size");
        }
        if (size_bytes > left_) {
            const std::uint64_t b = std::max(size_bytes, next_block_);
            values_.emplace_back(b);
            at_ = values_.back().data();
            left_ = b;
            next_block_ = kMinValueBlock;  // the estimate fell short: top up
        }
        std::byte* dst = at_;
        at_ += size_bytes;
        left_ -= size_bytes;
        spans_.at((first_ + slot) * owner_.ragged_fields_ + r) = Span{dst, size_bytes};
        return dst != nullptr ? dst : reinterpret_cast<std::byte*>(&left_);  // empty values
    }
    static constexpr std::size_t kFixed = static_cast<std::size_t>(-1);

private:
    const ChunkReadAhead& owner_;
    std::byte* rows_;
    const std::vector<std::uint64_t>& offsets_;
    std::vector<ChunkMemory>& values_;
    std::vector<Span>& spans_;
    std::uint64_t next_block_;
    std::uint64_t first_ = 0;
    std::byte* at_ = nullptr;
    std::uint64_t left_ = 0;
};

std::size_t ChunkMemory::mapped_size(std::size_t bytes) noexcept {
    static const std::size_t page = [] {
        const long p = ::sysconf(_SC_PAGESIZE);
        return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
    }();
    return (bytes + page - 1) / page * page;
}

ChunkMemory::ChunkMemory(std::size_t bytes) : bytes_(mapped_size(std::max<std::size_t>(1, bytes))) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        const int e = errno;
        bytes_ = 0;
        throw IoError("loader: chunk read-ahead: cannot map " + std::to_string(bytes) +
                      " bytes for a chunk: " + std::strerror(e));
    }
    data_ = static_cast<std::byte*>(p);
}

ChunkMemory& ChunkMemory::operator=(ChunkMemory&& o) noexcept {
    if (this != &o) {
        reset();
        data_ = o.data_;
        bytes_ = o.bytes_;
        o.data_ = nullptr;
        o.bytes_ = 0;
    }
    return *this;
}

void ChunkMemory::reset() noexcept {
    if (data_) ::munmap(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
}

ChunkMemory ChunkPool::take(std::size_t bytes, std::uint64_t in_use) {
    std::vector<ChunkMemory> unmapped;  // unmapped outside the lock, as it goes
    {
        std::lock_guard<std::mutex> lk(m_);
        const std::size_t mapped = ChunkMemory::mapped_size(bytes);
        for (std::size_t i = free_.size(); i-- > 0;) {
            if (free_[i].bytes() != mapped) continue;
            ChunkMemory m = std::move(free_[i]);
            free_[i] = std::move(free_.back());
            free_.pop_back();
            free_bytes_ -= mapped;
            return m;
        }
        while (!free_.empty() && free_bytes_ + in_use > limit_) {
            free_bytes_ -= free_.back().bytes();
            unmapped.push_back(std::move(free_.back()));
            free_.pop_back();
        }
    }
    return ChunkMemory(bytes);
}

void ChunkPool::give(ChunkMemory memory, std::uint64_t in_use) {
    const std::uint64_t bytes = memory.bytes();
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lk(m_);
    if (free_bytes_ + bytes + in_use > limit_) return;  // unmapped as `memory` goes
    free_bytes_ += bytes;
    free_.push_back(std::move(memory));
}

std::uint64_t ChunkPool::free_bytes() const {
    std::lock_guard<std::mutex> lk(m_);
    return free_bytes_;
}

bool ChunkReadAhead::supports(const Source& source) {
    return !source.fields().empty();
}

std::uint64_t ChunkReadAhead::estimate_bytes(std::uint64_t first, std::uint64_t count) const {
    // Whole pages of the rows' mapping (a mapping of its own, as the memory really taken).
    std::uint64_t bytes = ChunkMemory::mapped_size(count * row_bytes_);
    if (ragged_fields_ == 0) return bytes;
    // The stored bytes of the samples (TFRecord: payloads) less what the fixed fields take
    // decoded (Example features of fixed size), in one mapping, and the spans.
    std::uint64_t values = 0;
    for (std::uint64_t id = first; id < first + count; ++id) {
        const std::uint64_t stored = source_.sample_bytes(id);
        values += stored - std::min(stored, row_bytes_);
    }
    return bytes + ChunkMemory::mapped_size(values) + count * ragged_fields_ * sizeof(Span);
}

ChunkReadAhead::ChunkReadAhead(const Source& source, const EpochPlan& plan, std::uint64_t steps,
                               std::uint64_t chunk_samples, std::uint64_t budget_bytes,
                               std::size_t threads, std::chrono::seconds timeout,
                               std::shared_ptr<ChunkPool> pool)
    : source_(source),
      pool_(pool ? std::move(pool) : std::make_shared<ChunkPool>(budget_bytes)),
      chunk_samples_(std::max<std::uint64_t>(1, chunk_samples)),
      budget_(budget_bytes),
      timeout_(timeout) {
    for (const FieldInfo& f : source.fields()) {
        row_bytes_ += f.ragged ? 0 : f.sample_bytes;
        ragged_index_.push_back(f.ragged ? ragged_fields_++ : Sink::kFixed);
    }
    stats_.budget_bytes = budget_bytes;
    // The planned reads: each chunk's uses, and the chunks in the order of their first use.
    const std::uint64_t n = source.num_samples();
    const std::uint64_t slots = plan.batch_begin(std::min(steps, plan.steps));
    for (std::uint64_t k = 0; k < slots; ++k) {
        const std::int64_t id = plan.slot_id(k);
        if (id < 0) continue;
        const std::uint64_t c = static_cast<std::uint64_t>(id) / chunk_samples_;
        auto [it, added] = chunks_.try_emplace(c);
        if (added) {
            it->second.first = c * chunk_samples_;
            it->second.count = std::min(chunk_samples_, n - it->second.first);
            it->second.order = order_.size();
            order_.push_back(c);
        }
        ++it->second.uses;
    }
    for (auto& [number, c] : chunks_) c.bytes = estimate_bytes(c.first, c.count);
    for (std::size_t t = 0; t < std::clamp<std::size_t>(threads, 1, kMaxReaders); ++t) {
        try {
            threads_.emplace_back([this] { reader(); });
        } catch (const std::system_error&) {
            if (threads_.empty()) throw;  // none started: nothing to join
            break;                        // fewer chunks in flight, the same bytes
        }
    }
    stats_.readers = threads_.size();
}

ChunkReadAhead::~ChunkReadAhead() {
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lk(m_);
        stop_ = true;
        threads.swap(threads_);  // no read runs now (the prefetcher stopped first)
    }
    reader_cv_.notify_all();
    ready_cv_.notify_all();
    for (auto& t : threads) t.join();
}

void ChunkReadAhead::reader() const {
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
        if (stop_ || next_ >= order_.size()) return;
        const std::size_t i = next_;
        Chunk& c = chunks_.at(order_[i]);
        const std::uint64_t bytes = c.bytes;  // the estimate (exact for fixed fields)
        // Within the budget, or the earliest chunk a read waits for is this one (progress over
        // the bound; a read waiting for a later chunk waits for this one to be needed first).
        reader_cv_.wait(lk, [&] {
            return stop_ || next_ != i || resident_ + bytes <= budget_ ||
                   (!waiting_.empty() && *waiting_.begin() == i);
        });
        if (stop_) return;
        if (next_ != i) continue;  // another thread took it
        ++next_;
        // The next chunk fits too: one more reader for it (each taker wakes the next).
        if (next_ < order_.size() &&
            resident_ + bytes + chunks_.at(order_[next_]).bytes <= budget_) {
            reader_cv_.notify_one();
        }
        if (resident_ + bytes > budget_) ++stats_.over_budget_reads;
        resident_ += bytes;
        stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, resident_);
        c.state = Chunk::State::reading;
        const std::uint64_t in_use = resident_;
        const std::uint64_t first = c.first;
        const std::uint64_t count = c.count;
        ChunkMemory memory;
        std::vector<ChunkMemory> values;
        std::vector<Span> spans;
        std::exception_ptr error;
        lk.unlock();
        try {
            if (row_bytes_ > 0) memory = pool_->take(count * row_bytes_, in_use);
            spans.resize(count * ragged_fields_);
            const std::vector<std::uint64_t> offsets = field_offsets(source_.fields(), count);
            const std::uint64_t fixed = ChunkMemory::mapped_size(count * row_bytes_) +
                                        count * ragged_fields_ * sizeof(Span);
            Sink sink(*this, memory.data(), offsets, values, spans, bytes - std::min(bytes, fixed));
            // Consecutive ids: one read per field, or per run of adjacent records (per
            // kIdsPerRead ids, so the id list stays small against samples of a few bytes).
            std::vector<std::uint64_t> ids;
            for (std::uint64_t j = 0; j < count; j += kIdsPerRead) {
                const std::uint64_t k = std::min<std::uint64_t>(kIdsPerRead, count - j);
                ids.resize(k);
                for (std::uint64_t q = 0; q < k; ++q) ids[q] = first + j + q;
                sink.start_at(j);
                source_.read(ids.data(), ids.size(), sink);
            }
        } catch (...) {
            error = std::current_exception();
        }
        // What the chunk holds: the estimate is exact for fixed fields and stored payloads,
        // and corrected here where decoding changed the size (ragged Example features).
        std::uint64_t held = memory.bytes() + spans.size() * sizeof(Span);
        for (const ChunkMemory& v : values) held += v.bytes();
        lk.lock();
        c.memory = std::move(memory);
        c.values = std::move(values);
        c.spans = std::move(spans);
        c.error = error;
        c.state = Chunk::State::resident;
        resident_ = resident_ - bytes + held;
        c.bytes = held;
        stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, resident_);
        ++stats_.chunks_read;
        stats_.bytes_read += held;
        ready_cv_.notify_all();
        if (held < bytes) reader_cv_.notify_one();  // the estimate was high: budget freed
    }
}

void ChunkReadAhead::read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const {
    const std::vector<FieldInfo>& fields = source_.fields();
    // One lock for the batch (released while waiting for a chunk or reading a retry): the
    // copies are a few hundred bytes each.
    std::unique_lock<std::mutex> lk(m_);
    for (std::size_t k = 0; k < count; ++k) {
        const std::uint64_t id = ids[k];
        const auto it = chunks_.find(id / chunk_samples_);
        if (it == chunks_.end() || it->second.state == Chunk::State::freed ||
            it->second.uses == 0) {
            lk.unlock();  // not planned (a retry): straight from the source
            OffsetSink one(sink, k);
            source_.read(&id, 1, one);
            lk.lock();
            continue;
        }
        Chunk& c = it->second;
        if (c.state != Chunk::State::resident) {
            const auto t0 = Clock::now();
            const auto waiting = waiting_.insert(c.order);
            // A read waited: one more chunk in flight, up to kMaxReaders (the file system's
            // latency is hidden by reads in flight, as far as the budget leaves room for them).
            if (threads_.size() < kMaxReaders && next_ < order_.size()) {
                try {
                    threads_.emplace_back([this] { reader(); });
                    stats_.readers = threads_.size();
                } catch (const std::system_error&) {  // no more threads: as many in flight
                }
            }
            reader_cv_.notify_all();  // the progress rule may let a reader past the budget
            const bool ready =
                ready_cv_.wait_for(lk, timeout_, [&] { return c.state == Chunk::State::resident; });
            waiting_.erase(waiting);
            reader_cv_.notify_all();  // the earliest waited-for chunk may be another now
            stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
            if (!ready) {
                throw IoError("loader: chunk read-ahead: chunk " +
                              std::to_string(id / chunk_samples_) + " (samples " +
                              std::to_string(c.first) + " to " +
                              std::to_string(c.first + c.count - 1) + ") was not read within " +
                              std::to_string(timeout_.count()) + " s");
            }
        }
        if (c.error) std::rethrow_exception(c.error);
        const std::uint64_t row = id - c.first;
        std::uint64_t at = 0;
        for (std::size_t f = 0; f < fields.size(); ++f) {
            const std::size_t r = ragged_index_[f];
            if (r != Sink::kFixed) {
                const Span& v = c.spans[row * ragged_fields_ + r];
                std::byte* dst = sink.ragged(f, k, v.bytes);
                if (v.bytes > 0) std::memcpy(dst, v.data, v.bytes);
                continue;
            }
            const std::uint64_t b = fields[f].sample_bytes;
            std::memcpy(sink.fixed(f, k), c.memory.data() + at + row * b, b);
            at += c.count * b;
        }
        if (--c.uses == 0) {  // its last planned read: the memory goes back to the budget
            resident_ -= c.bytes;
            pool_->give(std::move(c.memory), resident_);
            std::vector<ChunkMemory>().swap(c.values);
            std::vector<Span>().swap(c.spans);
            c.state = Chunk::State::freed;
            reader_cv_.notify_one();  // budget for the next chunk
        }
    }
}

ReadAheadCounters ChunkReadAhead::stats() const {
    std::lock_guard<std::mutex> lk(m_);
    return stats_;
}

}  // namespace mpistage::detail
