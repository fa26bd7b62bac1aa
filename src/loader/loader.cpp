#include "mpistage/loader.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <unistd.h>

#include "stage/host_memory.hpp"
#include "mpistage/config.hpp"
#include "mpistage/device.hpp"

#if MPISTAGE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mpistage {

using Clock = std::chrono::steady_clock;

void LoaderOptions::validate() const {
    plan.validate();
    if (prefetch == 0) throw ConfigError("loader: prefetch must be at least 1");
    if (prefetch > kMaxPrefetch) {
        throw ConfigError("loader: prefetch " + std::to_string(prefetch) + " exceeds " +
                          std::to_string(kMaxPrefetch) + " batches");
    }
    if (io_threads > kMaxIoThreads) {
        throw ConfigError("loader: io_threads " + std::to_string(io_threads) + " exceeds " +
                          std::to_string(kMaxIoThreads));
    }
}

namespace {

/// One buffer of the ring: every fixed field [B, ...], the index [B] and the valid mask [B].
struct Slot {
    detail::HostBlock block;
    std::vector<std::byte*> field_data;          // per field (nullptr for ragged)
    std::vector<std::vector<std::byte>> ragged_values;
    std::vector<std::vector<std::int64_t>> ragged_offsets;
    std::int64_t* ids = nullptr;
    std::uint8_t* valid = nullptr;
    std::vector<std::uint64_t> read_ids;         // scratch: ids to read
    std::vector<std::size_t> read_pos;           // scratch: their batch positions
    std::uint64_t step = 0;
    std::size_t num_valid = 0;
    std::uint64_t bytes = 0;
};

/// The ring of slots, shared with every lease so it outlives the loader if batches do.
struct Ring {
    std::mutex m;
    std::condition_variable cv;
    std::vector<std::unique_ptr<Slot>> slots;
    std::deque<Slot*> free;

    void release(Slot* s) {
        {
            std::lock_guard<std::mutex> lk(m);
            free.push_back(s);
        }
        cv.notify_all();
    }
};

/// Writes a source's samples into a slot, mapping read order to batch positions.
class SlotSink final : public BatchSink {
public:
    SlotSink(Slot& slot, const std::vector<FieldInfo>& fields, std::vector<std::uint64_t>& lengths)
        : slot_(slot), fields_(fields), lengths_(lengths) {}
    std::byte* fixed(std::size_t field, std::size_t k) override {
        return slot_.field_data[field] + slot_.read_pos[k] * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t field, std::size_t k, std::uint64_t size_bytes) override {
        auto& values = slot_.ragged_values[field];
        const std::size_t at = values.size();
        values.resize(at + size_bytes);
        lengths_[field * stride_ + slot_.read_pos[k]] = size_bytes;
        return values.data() + at;
    }
    void set_stride(std::size_t b) { stride_ = b; }

private:
    Slot& slot_;
    const std::vector<FieldInfo>& fields_;
    std::vector<std::uint64_t>& lengths_;
    std::size_t stride_ = 0;
};

}  // namespace

struct Loader::Impl {
    Communicator comm;
    const Source& source;
    LoaderOptions options;
    std::uint64_t num_samples = 0;
    EpochTotals totals;
    LoaderStats stats;
    std::shared_ptr<Ring> ring;
    bool use_threads = false;
    bool epoch_active = false;

    Impl(const Communicator& c, const Source& s, LoaderOptions o)
        : comm(c.get()), source(s), options(std::move(o)) {}

    void check_same_options();
    std::uint64_t probe_contents() const;
    std::uint64_t content_hash = 0;
    void compute_cut();
    void allocate_ring();
    void fill(Slot& slot, const EpochPlan& plan, std::uint64_t step) const;
};

// Hash of the bytes of samples 0, N/2 and N-1: the same path may hold different files on
// different nodes, which metadata alone (shapes, sizes) does not reveal.
std::uint64_t Loader::Impl::probe_contents() const {
    class ProbeSink final : public BatchSink {
    public:
        explicit ProbeSink(const std::vector<FieldInfo>& fields) : fields_(fields) {
            fixed_.resize(fields.size());
        }
        std::byte* fixed(std::size_t field, std::size_t slot) override {
            auto& v = fixed_[field];
            const std::size_t need = (slot + 1) * fields_[field].sample_bytes;
            if (v.size() < need) v.resize(need);
            return v.data() + slot * fields_[field].sample_bytes;
        }
        std::byte* ragged(std::size_t, std::size_t, std::uint64_t size_bytes) override {
            ragged_.emplace_back(size_bytes);
            return ragged_.back().data();
        }
        std::uint64_t hash() const {
            std::string all;
            for (const auto& v : fixed_) all.append(reinterpret_cast<const char*>(v.data()), v.size());
            for (const auto& v : ragged_) all.append(reinterpret_cast<const char*>(v.data()), v.size());
            return fnv1a64(all);
        }

    private:
        const std::vector<FieldInfo>& fields_;
        std::vector<std::vector<std::byte>> fixed_;
        std::vector<std::vector<std::byte>> ragged_;
    };
    std::vector<std::uint64_t> ids{0, num_samples / 2, num_samples - 1};
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    ProbeSink sink(source.fields());
    source.read(ids.data(), ids.size(), sink);
    return sink.hash();
}

void Loader::Impl::check_same_options() {
    const std::string fp = plan_fingerprint(num_samples, comm.size(), options.plan) + "|" +
                           source.fingerprint() + "|" + std::to_string(content_hash);
    const std::uint64_t h = fnv1a64(fp);
    if (comm.allreduce_min(h) == comm.allreduce_max(h)) return;
    // Differing ranks: gather the parts so every rank builds the same, specific message.
    struct Part {
        const char* name;
        std::uint64_t value;
        std::string text;
    };
    const PlanOptions& p = options.plan;
    const std::vector<Part> parts = {
        {"batch_size", p.batch_size, std::to_string(p.batch_size)},
        {"seed", p.seed, std::to_string(p.seed)},
        {"sharding", static_cast<std::uint64_t>(p.sharding), to_string(p.sharding)},
        {"shuffle", static_cast<std::uint64_t>(p.shuffle), to_string(p.shuffle)},
        {"remainder", static_cast<std::uint64_t>(p.remainder), to_string(p.remainder)},
        {"num_samples", num_samples, std::to_string(num_samples)},
        {"dataset fingerprint", fnv1a64(source.fingerprint()), "hash " + std::to_string(fnv1a64(source.fingerprint()))},
        {"contents of samples 0, N/2, N-1 (same path, different file?)", content_hash,
         "hash " + std::to_string(content_hash)},
    };
    std::string msg = "loader: options differ across ranks:";
    for (const auto& part : parts) {
        const auto values = comm.allgather(part.value);
        const auto first = values.front();
        int other = -1;
        for (std::size_t r = 0; r < values.size(); ++r) {
            if (values[r] != first) {
                other = static_cast<int>(r);
                break;
            }
        }
        if (other < 0) continue;
        // Texts of rank 0 and the first differing rank, broadcast so all ranks agree.
        const std::string t0 = comm.broadcast(part.text, 0);
        const std::string t1 = comm.broadcast(part.text, other);
        msg += std::string(" ") + part.name + " is " + t0 + " on rank 0 but " + t1 + " on rank " +
               std::to_string(other) + ";";
    }
    msg += " every rank must pass the same plan options and the same files";
    throw ConfigError(msg);
}

void Loader::Impl::compute_cut() {
    const std::uint64_t cut = source.records_in_cut(comm.rank(), comm.size());
    const std::uint64_t total = comm.allreduce_sum(cut);
    const std::uint64_t first = comm.exscan_sum(cut);
    if (total != num_samples) {
        throw FormatError("loader: the byte-range cuts hold " + std::to_string(total) +
                          " records in all but the source reports " +
                          std::to_string(num_samples));
    }
    // Skew correction: rank r owns [begins[r], begins[r+1]); records of the cut outside that
    // range move (by descriptor) to the neighbouring rank that owns them.
    const auto begins = balanced_shard_begins(num_samples, comm.size());
    const auto r = static_cast<std::size_t>(comm.rank());
    const std::uint64_t lo = std::max(first, begins[r]);
    const std::uint64_t hi = std::min(first + cut, begins[r + 1]);
    const std::uint64_t overlap = hi > lo ? hi - lo : 0;
    stats.records_in_cut = cut;
    stats.records_moved = (cut - overlap) + ((begins[r + 1] - begins[r]) - overlap);
}

void Loader::Impl::allocate_ring() {
    const auto& fields = source.fields();
    const std::uint64_t b = options.plan.batch_size;
    std::uint64_t fixed_bytes = 0;
    std::uint64_t sample_bytes = 0;
    for (const auto& f : fields) {
        if (f.ragged) continue;
        sample_bytes += f.sample_bytes;
        fixed_bytes += (checked_mul(f.sample_bytes, b, "loader: batch of field '" + f.name + "'") + 63) / 64 * 64;
    }
    const std::uint64_t slot_bytes = fixed_bytes + checked_mul(b, sizeof(std::int64_t) + 1, "loader: batch");
    // More slots than batches in an epoch would only hold memory.
    const std::uint64_t slots = std::max<std::uint64_t>(1, std::min<std::uint64_t>(options.prefetch, totals.steps));
    const std::uint64_t ring_bytes = checked_mul(slots, slot_bytes, "loader: prefetch ring");
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page_size > 0) {
        const std::uint64_t limit = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size) / 2 /
                                    static_cast<std::uint64_t>(std::max(1, comm.node_size()));
        if (ring_bytes > limit) {
            throw ConfigError("loader: the prefetch ring needs " + std::to_string(ring_bytes) + " bytes (" +
                              std::to_string(slots) + " slots x batch_size " + std::to_string(b) + " x " +
                              std::to_string(sample_bytes) + " bytes per sample), more than half of this "
                              "node's memory shared by its " + std::to_string(comm.node_size()) +
                              " rank(s) (" + std::to_string(limit) + " bytes each); lower the batch "
                              "size or prefetch depth");
        }
    }
    bool pinned = false;
    if (options.pin_memory) {
        const CudaDeviceInfo dev = probe_cuda_device(comm.node_rank());
        pinned = dev.usable;
#if MPISTAGE_HAVE_CUDA
        if (pinned && cudaSetDevice(dev.device) != cudaSuccess) {
            (void)cudaGetLastError();
            pinned = false;
        }
#endif
    }
    ring = std::make_shared<Ring>();
    for (std::uint64_t i = 0; i < slots; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->block = detail::HostBlock(slot_bytes, pinned);
        std::byte* p = slot->block.data();
        for (const auto& f : fields) {
            if (f.ragged) {
                slot->field_data.push_back(nullptr);
            } else {
                slot->field_data.push_back(p);
                p += (f.sample_bytes * b + 63) / 64 * 64;
            }
        }
        slot->ids = reinterpret_cast<std::int64_t*>(p);
        slot->valid = reinterpret_cast<std::uint8_t*>(p + b * sizeof(std::int64_t));
        slot->ragged_values.resize(fields.size());
        slot->ragged_offsets.resize(fields.size());
        slot->read_ids.reserve(b);
        slot->read_pos.reserve(b);
        ring->free.push_back(slot.get());
        ring->slots.push_back(std::move(slot));
    }
    stats.pinned = pinned;
}

void Loader::Impl::fill(Slot& slot, const EpochPlan& plan, std::uint64_t step) const {
    const auto& fields = source.fields();
    const std::size_t b = plan.batch_size;
    const std::int64_t* ids = plan.ids.data() + step * b;
    const std::uint8_t* valid = plan.valid.data() + step * b;
    slot.step = step;
    slot.num_valid = 0;
    slot.bytes = 0;
    slot.read_ids.clear();
    slot.read_pos.clear();
    for (std::size_t j = 0; j < b; ++j) {
        slot.ids[j] = ids[j];
        slot.valid[j] = valid[j];
        slot.num_valid += valid[j];
        if (ids[j] >= 0) {
            slot.read_ids.push_back(static_cast<std::uint64_t>(ids[j]));
            slot.read_pos.push_back(j);
        } else {
            for (std::size_t f = 0; f < fields.size(); ++f) {
                if (!fields[f].ragged) {
                    std::memset(slot.field_data[f] + j * fields[f].sample_bytes, 0,
                                fields[f].sample_bytes);
                }
            }
        }
    }
    bool any_ragged = false;
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].ragged) {
            any_ragged = true;
            slot.ragged_values[f].clear();
        }
    }
    std::vector<std::uint64_t> lengths(any_ragged ? fields.size() * b : 0, 0);
    SlotSink sink(slot, fields, lengths);
    sink.set_stride(b);
    source.read(slot.read_ids.data(), slot.read_ids.size(), sink);
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].ragged) {
            auto& off = slot.ragged_offsets[f];
            off.assign(b + 1, 0);
            for (std::size_t j = 0; j < b; ++j) {
                off[j + 1] = off[j] + static_cast<std::int64_t>(lengths[f * b + j]);
            }
            slot.bytes += static_cast<std::uint64_t>(off[b]);
        } else {
            slot.bytes += fields[f].sample_bytes * slot.read_ids.size();
        }
    }
}

Loader::Loader(const Communicator& comm, const Source& source, LoaderOptions options)
    : impl_(std::make_unique<Impl>(comm, source, std::move(options))) {
    Impl& d = *impl_;
    run_agreed(d.comm, [&] {
        d.options.validate();
        d.num_samples = source.num_samples();
        if (d.num_samples == 0) throw ConfigError("loader: the source has no samples: nothing to shard");
        d.content_hash = d.probe_contents();
    });
    // One fingerprint comparison (N, plan options, dataset) before anything is derived from them.
    d.check_same_options();
    run_agreed(d.comm, [&] { d.totals = plan_totals(d.num_samples, d.comm.size(), d.options.plan); });
    LocalStatus cut_status;
    try {
        d.compute_cut();
    } catch (...) {
        cut_status = LocalStatus::from_current_exception();
    }
    agree_or_throw(d.comm, cut_status);
    run_agreed(d.comm, [&] { d.allocate_ring(); });
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    d.use_threads = d.options.io_threads > 0 &&
                    (!source.reads_use_mpi() || level == MPI_THREAD_MULTIPLE);
}

Loader::~Loader() = default;

std::uint64_t Loader::num_samples() const noexcept { return impl_->num_samples; }
const EpochTotals& Loader::totals() const noexcept { return impl_->totals; }
const LoaderStats& Loader::stats() const noexcept { return impl_->stats; }
const LoaderOptions& Loader::options() const noexcept { return impl_->options; }
const Communicator& Loader::comm() const noexcept { return impl_->comm; }
const Source& Loader::source() const noexcept { return impl_->source; }

// ---- one epoch: the ordered, bounded prefetch pipeline ----------------------------------------

struct EpochRange::Impl {
    Loader::Impl* loader = nullptr;
    std::shared_ptr<Ring> ring;
    EpochPlan plan;
    std::uint64_t epoch = 0;
    std::vector<std::thread> threads;
    // Guarded by ring->m:
    std::map<std::uint64_t, std::pair<Slot*, std::exception_ptr>> ready;
    std::uint64_t next_issue = 0;
    std::size_t in_flight = 0;
    bool stop = false;
    // Consumer only:
    std::uint64_t next_consume = 0;
    Clock::time_point started{};
    bool finished = false;

    void worker() {
        for (;;) {
            Slot* slot = nullptr;
            std::uint64_t step = 0;
            {
                std::unique_lock<std::mutex> lk(ring->m);
                ring->cv.wait(lk, [&] {
                    return stop || next_issue >= plan.steps || !ring->free.empty();
                });
                if (stop || next_issue >= plan.steps) return;
                slot = ring->free.front();
                ring->free.pop_front();
                step = next_issue++;
                ++in_flight;
            }
            std::exception_ptr error;
            try {
                loader->fill(*slot, plan, step);
            } catch (...) {
                error = std::current_exception();
            }
            {
                std::lock_guard<std::mutex> lk(ring->m);
                ready[step] = {slot, error};
                --in_flight;
            }
            ring->cv.notify_all();
        }
    }

    void shutdown() noexcept {
        {
            std::lock_guard<std::mutex> lk(ring->m);
            stop = true;
        }
        ring->cv.notify_all();
        for (auto& t : threads) {
            if (t.joinable()) t.join();
        }
        threads.clear();
        std::lock_guard<std::mutex> lk(ring->m);
        for (auto& [step, entry] : ready) ring->free.push_back(entry.first);
        ready.clear();
        if (loader) loader->epoch_active = false;
    }

    std::string slots_held_message() const {
        return "loader: all " + std::to_string(ring->slots.size()) +
               " prefetch slots are held by the caller (batches or tensors still alive), so "
               "batch " + std::to_string(next_consume) + " of epoch " + std::to_string(epoch) +
               " cannot be read; release earlier batches or raise the prefetch depth";
    }

    // Produces the slot of the next step on this rank (or an error status).
    Slot* produce(LocalStatus& status) {
        const std::uint64_t step = next_consume;
        if (!loader->use_threads) {
            Slot* slot = nullptr;
            {
                std::lock_guard<std::mutex> lk(ring->m);
                if (!ring->free.empty()) {
                    slot = ring->free.front();
                    ring->free.pop_front();
                }
            }
            if (!slot) {
                status.failed = true;
                status.kind = ErrorKind::config;
                status.message = slots_held_message();
                return nullptr;
            }
            try {
                loader->fill(*slot, plan, step);
            } catch (...) {
                status = LocalStatus::from_current_exception();
            }
            return slot;
        }
        std::unique_lock<std::mutex> lk(ring->m);
        bool stuck = false;
        ring->cv.wait(lk, [&] {
            if (ready.count(step)) return true;
            stuck = ring->free.empty() && in_flight == 0 && next_issue <= step;
            return stuck;
        });
        if (!ready.count(step)) {
            status.failed = true;
            status.kind = ErrorKind::config;
            status.message = slots_held_message();
            return nullptr;
        }
        auto entry = ready[step];
        ready.erase(step);
        if (entry.second) status = LocalStatus::from_exception(entry.second);
        return entry.first;
    }
};

EpochRange::EpochRange(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EpochRange::EpochRange(EpochRange&&) noexcept = default;
EpochRange& EpochRange::operator=(EpochRange&& o) noexcept {
    if (this != &o) {
        if (impl_) impl_->shutdown();
        impl_ = std::move(o.impl_);
    }
    return *this;
}
EpochRange::~EpochRange() {
    if (impl_) impl_->shutdown();
}

std::uint64_t EpochRange::steps() const noexcept { return impl_->plan.steps; }
const EpochPlan& EpochRange::plan() const noexcept { return impl_->plan; }

bool EpochRange::next(HostBatch& out) {
    Impl& d = *impl_;
    Loader::Impl& l = *d.loader;
    // Release the caller's previous batch first: `out` is being replaced, so its slot must not
    // count as held (otherwise `while (range.next(b))` and the range-for iterator fail at
    // step 1 with prefetch = 1). Copies the caller kept elsewhere still hold their slots.
    out = HostBatch();
    if (d.next_consume >= d.plan.steps) {
        if (!d.finished) {
            d.finished = true;
            if (d.plan.steps > 0) l.stats.epoch_time += Clock::now() - d.started;
            d.shutdown();
        }
        out = HostBatch();
        return false;
    }
    const auto t0 = Clock::now();
    if (d.next_consume == 0) d.started = t0;
    LocalStatus status;
    Slot* slot = d.produce(status);
    // The lease returns the slot to the ring when the last batch copy or tensor is gone, also
    // when the agreement below throws.
    std::shared_ptr<Ring> ring = d.ring;
    std::shared_ptr<void> lease;
    if (slot) lease = std::shared_ptr<void>(slot, [ring](void* s) { ring->release(static_cast<Slot*>(s)); });
    try {
        agree_or_throw(l.comm, status);
    } catch (...) {
        lease.reset();
        d.shutdown();
        d.next_consume = d.plan.steps;
        d.finished = true;
        throw;
    }
    l.stats.wait_time += Clock::now() - t0;
    const auto& fields = l.source.fields();
    HostBatch b;
    b.epoch_ = d.epoch;
    b.step_ = slot->step;
    b.batch_size_ = d.plan.batch_size;
    b.index_ = slot->ids;
    b.valid_ = slot->valid;
    b.num_valid_ = slot->num_valid;
    b.fields_.resize(fields.size());
    for (std::size_t f = 0; f < fields.size(); ++f) {
        HostField& hf = b.fields_[f];
        hf.info = &fields[f];
        if (fields[f].ragged) {
            hf.data = slot->ragged_values[f].data();
            hf.size_bytes = slot->ragged_values[f].size();
            hf.offsets = slot->ragged_offsets[f].data();
        } else {
            hf.data = slot->field_data[f];
            hf.size_bytes = fields[f].sample_bytes * d.plan.batch_size;
        }
    }
    b.lease_ = std::move(lease);
    l.stats.batches += 1;
    l.stats.valid_samples += slot->num_valid;
    l.stats.padding_slots += d.plan.batch_size - slot->num_valid;
    l.stats.bytes_read += slot->bytes;
    ++d.next_consume;
    out = std::move(b);
    return true;
}

EpochRange Loader::epoch(std::uint64_t e) {
    Impl& d = *impl_;
    LocalStatus status;
    if (d.epoch_active) {
        status.failed = true;
        status.kind = ErrorKind::config;
        status.message = "loader: epoch " + std::to_string(e) +
                         " requested while another epoch of this loader is still in flight";
    }
    agree_or_throw(d.comm, status);
    if (d.comm.allreduce_min(e) != d.comm.allreduce_max(e)) {
        throw ConfigError("loader: ranks asked for different epochs (epoch " +
                          std::to_string(d.comm.allreduce_min(e)) + " vs " +
                          std::to_string(d.comm.allreduce_max(e)) + ")");
    }
    auto impl = std::make_unique<EpochRange::Impl>();
    impl->loader = &d;
    impl->ring = d.ring;
    impl->epoch = e;
    run_agreed(d.comm, [&] { impl->plan = plan_epoch(d.num_samples, d.comm.size(), d.comm.rank(), d.options.plan, e); });
    d.epoch_active = true;
    EpochRange range(std::move(impl));
    // No more threads than batches; a failure to start one is agreed like any other error (the
    // range's destructor joins the threads already started). The agreement is collective, so
    // every rank makes it, also ranks that read on the caller's thread (io_threads may differ).
    EpochRange::Impl* raw = range.impl_.get();
    const std::uint64_t count =
        d.use_threads ? std::min<std::uint64_t>(d.options.io_threads, raw->plan.steps) : 0;
    run_agreed(d.comm, [&] {
        try {
            for (std::uint64_t t = 0; t < count; ++t) raw->threads.emplace_back([raw] { raw->worker(); });
        } catch (const std::system_error& e) {
            throw IoError("loader: cannot start I/O thread " + std::to_string(raw->threads.size()) +
                          " of " + std::to_string(count) + ": " + e.what());
        }
    });
    return range;
}

}  // namespace mpistage
