// Clairvoyant chunk read-ahead (see chunk_read_ahead.hpp).
#include "tier/chunk_read_ahead.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// Writes a chunk's rows back to back, field after field (field f at `offsets[f]`).
class ChunkSink final : public BatchSink {
public:
    ChunkSink(std::byte* data, const std::vector<std::uint64_t>& offsets,
              const std::vector<FieldInfo>& f, std::uint64_t first_row)
        : data_(data), offsets_(offsets), fields_(f), first_(first_row) {}
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        return data_ + offsets_[field] + (first_ + slot) * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t, std::size_t, std::uint64_t) override {
        throw FormatError(
            "chunk read-ahead: a ragged field (only fixed-size fields are read "
            "ahead by chunks)");
    }

private:
    std::byte* data_;
    const std::vector<std::uint64_t>& offsets_;
    const std::vector<FieldInfo>& fields_;
    std::uint64_t first_;
};

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

}  // namespace

ChunkMemory::ChunkMemory(std::size_t bytes) : bytes_(std::max<std::size_t>(1, bytes)) {
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

bool ChunkReadAhead::supports(const Source& source) {
    for (const FieldInfo& f : source.fields()) {
        if (f.ragged) return false;
    }
    return !source.fields().empty();
}

ChunkReadAhead::ChunkReadAhead(const Source& source, const EpochPlan& plan, std::uint64_t steps,
                               std::uint64_t chunk_samples, std::uint64_t budget_bytes,
                               std::size_t threads, std::chrono::seconds timeout)
    : source_(source),
      chunk_samples_(std::max<std::uint64_t>(1, chunk_samples)),
      budget_(budget_bytes),
      timeout_(timeout) {
    for (const FieldInfo& f : source.fields()) row_bytes_ += f.sample_bytes;
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
    cv_.notify_all();
    for (auto& t : threads) t.join();
}

void ChunkReadAhead::reader() const {
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
        if (stop_ || next_ >= order_.size()) return;
        const std::size_t i = next_;
        Chunk& c = chunks_.at(order_[i]);
        const std::uint64_t bytes = chunk_bytes(c);
        // Within the budget, or the earliest chunk a read waits for is this one (progress over
        // the bound; a read waiting for a later chunk waits for this one to be needed first).
        cv_.wait(lk, [&] {
            return stop_ || next_ != i || resident_ + bytes <= budget_ ||
                   (!waiting_.empty() && *waiting_.begin() == i);
        });
        if (stop_) return;
        if (next_ != i) continue;  // another thread took it
        ++next_;
        if (resident_ + bytes > budget_) ++stats_.over_budget_reads;
        resident_ += bytes;
        stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, resident_);
        c.state = Chunk::State::reading;
        ChunkMemory memory;
        const std::vector<FieldInfo>& fields = source_.fields();
        std::exception_ptr error;
        lk.unlock();
        try {
            memory = ChunkMemory(bytes);
            const std::vector<std::uint64_t> offsets = field_offsets(fields, c.count);
            // Consecutive ids: one read per field (per kIdsPerRead ids, so the id list stays
            // small against samples of a few bytes).
            std::vector<std::uint64_t> ids;
            for (std::uint64_t j = 0; j < c.count; j += kIdsPerRead) {
                const std::uint64_t k = std::min<std::uint64_t>(kIdsPerRead, c.count - j);
                ids.resize(k);
                for (std::uint64_t q = 0; q < k; ++q) ids[q] = c.first + j + q;
                ChunkSink sink(memory.data(), offsets, fields, j);
                source_.read(ids.data(), ids.size(), sink);
            }
        } catch (...) {
            error = std::current_exception();
        }
        lk.lock();
        c.memory = std::move(memory);
        c.error = error;
        c.state = Chunk::State::resident;
        ++stats_.chunks_read;
        stats_.bytes_read += bytes;
        cv_.notify_all();
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
            cv_.notify_all();
            const bool ready =
                cv_.wait_for(lk, timeout_, [&] { return c.state == Chunk::State::resident; });
            waiting_.erase(waiting);
            cv_.notify_all();  // the earliest waited-for chunk may be another now (reader)
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
            const std::uint64_t b = fields[f].sample_bytes;
            std::memcpy(sink.fixed(f, k), c.memory.data() + at + row * b, b);
            at += c.count * b;
        }
        if (--c.uses == 0) {  // its last planned read: the memory goes back to the budget
            c.memory.reset();
            c.state = Chunk::State::freed;
            resident_ -= chunk_bytes(c);
            cv_.notify_all();
        }
    }
}

ReadAheadCounters ChunkReadAhead::stats() const {
    std::lock_guard<std::mutex> lk(m_);
    return stats_;
}

}  // namespace mpistage::detail
