// The public Loader: options validation, option agreement across ranks, epoch start. The
// prefetch pipeline is in src/pipeline, host memory and device choice in src/device.
#include "mpistage/loader.hpp"

#include <algorithm>
#include <cstdio>

#include "comm/agree.hpp"
#include "device/cuda_api.hpp"
#include "device/device_choice.hpp"
#include "device/host_memory.hpp"
#include "loader/contents.hpp"
#include "loader/device_delivery.hpp"
#include "loader/loader_impl.hpp"
#include "loader/stream/stream_config.hpp"
#include "loader/stream/stream_engine.hpp"
#include "mpistage/hash.hpp"
#include "plan/consumed_digest.hpp"
#include "two_phase/two_phase.hpp"
#include "util/memory_budget.hpp"

namespace mpistage {

void LoaderOptions::validate() const {
    plan.validate();
    if (pipeline.prefetch == 0) throw ConfigError("loader: pipeline.prefetch must be at least 1");
    if (pipeline.prefetch > kMaxPrefetch) {
        throw ConfigError("loader: pipeline.prefetch " + std::to_string(pipeline.prefetch) +
                          " exceeds " + std::to_string(kMaxPrefetch) + " batches");
    }
    if (pipeline.io_threads > kMaxIoThreads) {
        throw ConfigError("loader: pipeline.io_threads " + std::to_string(pipeline.io_threads) +
                          " exceeds " + std::to_string(kMaxIoThreads));
    }
    (void)parse_device(delivery.device);
    if (safety.fingerprint == FingerprintLevel::ends ||
        safety.fingerprint == FingerprintLevel::sampled_v4) {
        throw ConfigError("loader: fingerprint level '" + to_string(safety.fingerprint) +
                          "' is only read from old saved states (format versions " +
                          (safety.fingerprint == FingerprintLevel::ends ? "1 and 2" : "3 and 4") +
                          "); use sampled or full");
    }
    check_timeout(safety.timeout, "loader");
    if (pipeline.two_phase == TwoPhase::on && plan.budget.active()) {
        throw ConfigError(
            "loader: two-phase reads exchange fixed batches; they do not combine "
            "with a batch budget (batch_bytes/batch_tokens)");
    }
    if (tier.stage == Stage::none && tier.stage_read != StageRead::automatic) {
        throw ConfigError("loader: tier.stage_read " + to_string(tier.stage_read) +
                          " says how the memory tier takes in a shard; it needs tier.stage memory "
                          "or auto, got tier.stage none");
    }
    const bool global_unstaged = plan.sharding == Sharding::global && tier.stage == Stage::none;
    if (pipeline.two_phase == TwoPhase::on && !global_unstaged) {
        throw ConfigError(
            "loader: two-phase reads need global sharding and tier.stage none; got "
            "sharding " +
            to_string(plan.sharding) + " and tier.stage " + to_string(tier.stage));
    }
}

void Loader::Impl::require_same_options() const {
    const PlanOptions& p = options.plan;
    const std::uint64_t dataset = fnv1a64(source.fingerprint());
    // One named value per option field (LoaderOptions' names), so a difference names the field.
    require_same(comm,
                 {{"plan.batch_size", std::to_string(p.batch_size)},
                  {"plan.seed", std::to_string(p.seed)},
                  {"plan.sharding", to_string(p.sharding)},
                  {"plan.shuffle", to_string(p.shuffle)},
                  {"plan.remainder", to_string(p.remainder)},
                  {"plan.balance_steps", p.balance_steps ? "true" : "false"},
                  {"plan.chunk_samples", std::to_string(p.chunk_samples)},
                  {"plan.window_chunks", std::to_string(p.window_chunks)},
                  {"plan.budget.batch_bytes", std::to_string(p.budget.batch_bytes)},
                  {"plan.budget.batch_tokens", std::to_string(p.budget.batch_tokens)},
                  {"plan.budget.max_batch_samples", std::to_string(p.budget.max_batch_samples)},
                  {"plan.budget.bucket_window", std::to_string(p.budget.bucket_window)},
                  {"plan.budget.token_field", std::to_string(p.budget.token_field)},
                  {"num_samples", std::to_string(num_samples)},
                  {"dataset fingerprint", "hash " + std::to_string(dataset)},
                  {"timeout", std::to_string(options.safety.timeout.count()) + " s"},
                  {"verify_files", options.safety.verify_files ? "true" : "false"},
                  {"accept_legacy_state", options.safety.accept_legacy_state ? "true" : "false"},
                  {"fingerprint", to_string(options.safety.fingerprint)},
                  {"two_phase", to_string(options.pipeline.two_phase)},
                  {"plan fingerprint", plan_fingerprint(num_samples, comm.size(), p)}},
                 "loader: options differ across ranks",
                 "every rank must pass the same plan options and the same files");
}

void Loader::Impl::compute_cut() {
    const std::uint64_t cut = source.records_in_cut(comm.rank(), comm.size());
    const std::uint64_t total = comm.allreduce_sum(cut);
    const std::uint64_t first = comm.exscan_sum(cut);
    if (total != num_samples) {
        throw FormatError("loader: the byte-range cuts hold " + std::to_string(total) +
                          " records in all but the source reports " + std::to_string(num_samples));
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

void Loader::Impl::make_cost_functions() {
    const BatchBudget& budget = options.plan.budget;
    if (!budget.active()) return;
    const auto& fields = source.fields();
    std::uint64_t fixed = 0;
    std::size_t ragged = 0;
    for (const FieldInfo& f : fields) {
        fixed += f.ragged ? 0 : f.sample_bytes;
        ragged += f.ragged ? 1 : 0;
    }
    const Source* src = &source;
    sample_bytes = [src](std::uint64_t id) { return src->sample_bytes(id); };
    if (budget.batch_tokens == 0) return;
    const std::size_t t = budget.token_field;
    if (t >= fields.size() || !fields[t].ragged) {
        throw ConfigError("loader: the token field (index " + std::to_string(t) +
                          (t < fields.size() ? ", '" + fields[t].name + "'" : std::string()) +
                          ") is not a ragged field of the source");
    }
    if (ragged != 1) {
        throw ConfigError(
            "loader: a token budget needs a source with exactly one ragged field "
            "(tokens come from the sample's bytes); this one has " +
            std::to_string(ragged));
    }
    const std::uint64_t element = std::max<std::uint64_t>(1, dtype_size(fields[t].dtype));
    sample_tokens = [src, fixed, element](std::uint64_t id) {
        const std::uint64_t bytes = src->sample_bytes(id);
        return (bytes > fixed ? bytes - fixed : 0) / element;
    };
}

EpochPlan Loader::Impl::plan_of(std::uint64_t e, const EpochStart& start) const {
    SampleBytesFn sizes = sample_bytes;
    if (options.plan.balance_steps) {
        sizes = [&src = source](std::uint64_t id) { return src.sample_bytes(id); };
    }
    // Fixed batches are computed per slot (O(W) bookkeeping, flat in N); budget batches and
    // byte-balanced steps are stored (docs/architecture.md, "Memory per rank").
    return plan_epoch_on_demand(num_samples, comm.size(), comm.rank(), options.plan, e, start,
                                sizes, sample_tokens);
}

bool Loader::Impl::ring_needs_node_size(std::uint64_t b, std::uint64_t slots) const noexcept {
    try {
        const std::uint64_t bytes =
            checked_mul(slots, detail::slot_bytes(source.fields(), b), "loader: prefetch ring");
        // The node's rank count is at most the communicator's: a ring within the share among
        // all of them is within the node's share whatever the split says.
        const std::uint64_t share = detail::memory_share_bytes(comm.size());
        return share != 0 && bytes > share;
    } catch (...) {
        return false;  // allocate_ring throws the same, agreed
    }
}

void Loader::Impl::allocate_ring(std::uint64_t b, std::uint64_t slots) {
    const auto& fields = source.fields();
    const std::uint64_t bytes = detail::slot_bytes(fields, b);
    // Without the node split no rank's ring exceeds its share among all ranks of the
    // communicator (ring_needs_node_size), a bound of the node's ranks.
    const int ranks_on_node = comm.has_node_split() ? comm.node_size() : comm.size();
    detail::check_memory_share(checked_mul(slots, bytes, "loader: prefetch ring"), ranks_on_node,
                               "loader: the prefetch ring (" + std::to_string(slots) +
                                   " slots of " + std::to_string(b) + " samples, " +
                                   std::to_string(bytes) + " bytes each)",
                               "lower the batch size or prefetch depth");
    // Pinned blocks are allocated with the chosen device current (no context on another
    // device), the caller's context restored.
    const detail::LoaderDevice& dev = device;
    {
        detail::DeviceGuard guard(dev.pinned ? dev.device.index : -1);
        ring = detail::make_ring(fields, b, slots, dev.pinned);
    }
    watch_copies();
    stats.pinned = dev.pinned;
    stats.device = dev.device;
}

void Loader::Impl::watch_copies() {
    if (!ring || !stager) return;
    // Slots lent to host-to-device copies come back from the copy stream's host functions,
    // which a failed device never runs: waits for them check the stream and end within the
    // timeout (Ring::wait_while_lent), so the failure is agreed as a read error.
    detail::DeviceStager* s = stager.get();
    ring->copy_check = [s] { s->check(); };
    ring->copy_timeout = options.safety.timeout;
}

namespace {

/// The memory tier's options from the loader's: the one place LoaderOptions reaches the tier
/// (src/tier sits below the loader and does not include loader.hpp).
detail::TierSetup tier_options(const LoaderOptions& o) {
    detail::TierSetup t;
    t.stage = o.tier.stage;
    t.stage_budget_bytes = o.tier.stage_budget_bytes;
    t.stage_ranks_per_node = o.tier.stage_ranks_per_node;
    t.stage_read = o.tier.stage_read;
    t.map_node = o.plan.sharding == Sharding::global;
    return t;
}

/// The tier's report into the loader's stats, field for field.
void copy_tier_stats(const detail::TierStats& t, LoaderStats& s) {
    s.tier = t.tier;
    s.tier_note = t.tier_note;
    s.staged_bytes = t.staged_bytes;
    s.stage_time = t.stage_time;
    s.stage_populate_time = t.times.populate;
    s.stage_read_time = t.times.read;
    s.stage_map_node_time = t.times.map_node;
    s.stage_read_method = t.times.read_method;
    s.stage_read_note = t.times.read_note;
}

}  // namespace

Loader::Loader(CommRef comm, const Source& source, LoaderOptions options)
    : impl_(std::make_unique<Impl>(comm, source, std::move(options))) {
    Impl& d = *impl_;
    d.comm.set_context({"loader: construction", -1, -1, "", -1});
    run_agreed(d.comm, [&] {
        d.options.validate();
        detail::refuse_stream_options(d.options);
        // Armed before the first collective (this agreement), so a rank that never arrives
        // is reported within the caller's timeout; agreed across ranks just below.
        d.comm.set_timeout(d.options.safety.timeout);
        d.num_samples = source.num_samples();
        if (d.num_samples == 0) {
            throw ConfigError("loader: the source has no samples: nothing to shard");
        }
    });
    // One comparison of N, the plan options and the dataset before anything is derived from
    // them; the timeout is agreed there, so the watchdog deadline is the same everywhere.
    d.require_same_options();
    d.comm.set_timeout(d.options.safety.timeout);
    d.comm.set_context({"loader: content fingerprint", -1, -1, "", -1});
    detail::check_same_contents(d.comm, source, d.num_samples, d.options.safety.verify_files);
    d.comm.set_context({"loader: construction", -1, -1, "", -1});
    std::uint64_t capacity = d.options.plan.batch_size;
    run_agreed(d.comm, [&] {
        d.make_cost_functions();
        if (d.options.plan.budget.active()) {
            // Budget batches: the ring's slots hold the largest batch of epoch 0's plan (of
            // any rank); an epoch with a larger batch reallocates the ring (see `epoch`).
            // With Shuffle::chunks the chunk sizes may come from the tier's budget, known only
            // after staging: the global order's batches size the ring until then (the same
            // samples and budget; the epoch's own plan reallocates it if it needs more).
            PlanOptions sizing = d.options.plan;
            if (sizing.shuffle == Shuffle::chunks) {
                sizing.shuffle = Shuffle::global;
                sizing.chunk_samples = sizing.window_chunks = 0;
            }
            const EpochPlan first =
                plan_epoch_on_demand(d.num_samples, d.comm.size(), d.comm.rank(), sizing, 0, {},
                                     d.sample_bytes, d.sample_tokens);
            d.totals = first.totals;
            capacity = first.batch_size;
        } else {
            d.totals = plan_totals(d.num_samples, d.comm.size(), d.options.plan);
        }
    });
    agree_or_throw(d.comm, capture([&] { d.compute_cut(); }));
    // More slots than batches in an epoch would only hold memory.
    // The device kind is agreed (all CUDA, or all CPU with one line for the job).
    d.comm.set_context({"loader: device", -1, -1, "", -1});
    d.device = detail::agree_device(d.comm, d.options);
    // The window agreement's shape must be the same on every rank; prefetch may differ. The
    // same allreduce says whether some rank needs the node's rank count to check its prefetch
    // ring (a ring above its share among all ranks); only then is the node split made, on
    // every rank, here. Budget batches may reallocate the ring at any epoch, where it is checked
    // again: they make the split here too (the budget options are the same on every rank).
    const std::uint64_t ring_slots = std::max<std::uint64_t>(
        1, std::min<std::uint64_t>(d.options.pipeline.prefetch, d.totals.steps));
    const std::vector<std::uint64_t> agreed = d.comm.allreduce_min(
        std::vector<std::uint64_t>{static_cast<std::uint64_t>(d.options.pipeline.prefetch),
                                   d.ring_needs_node_size(capacity, ring_slots) ? 0u : 1u});
    d.min_prefetch = agreed[0];
    if (agreed[1] == 0 || d.options.plan.budget.active()) d.comm.split_node();
    run_agreed(d.comm, [&] {
        d.allocate_ring(capacity, ring_slots);
        if (d.device.device.cuda) {
            d.stager =
                detail::make_loader_stager(d.device.device, d.options, d.options.pipeline.prefetch);
            d.watch_copies();
        }
    });
    d.comm.set_context({"loader: stage " + to_string(d.options.tier.stage), -1, -1, "", -1});
    detail::TierStats tier_stats;
    d.tier = detail::build_memory_tier(d.comm, source, tier_options(d.options),
                                       detail::ring_bytes(*d.ring), tier_stats);
    copy_tier_stats(tier_stats, d.stats);
    d.resolve_chunk_shuffle(tier_stats);
    if (d.options.plan.budget.active() && d.options.plan.shuffle == Shuffle::chunks) {
        d.comm.set_context({"loader: budget batches of the chunk order", -1, -1, "", -1});
        run_agreed(d.comm, [&] { d.totals = d.plan_of(0, {}).totals; });
    }
    // After the staging, so the fingerprint's 1026 sample reads (half of a file of 2000 150 KB
    // rows) come from the staged pages instead of caching the file first in readahead folios
    // (benchmarks/README.md, "Huge pages of the page cache").
    d.comm.set_context(
        {"loader: dataset fingerprint (" + to_string(d.options.safety.fingerprint) + ")", -1, -1,
         "", -1});
    d.record_identity();
    d.comm.set_context({"loader: construction", -1, -1, "", -1});
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    // A tier within one node serves a small batch with plain loads (a few µs of memcpy):
    // copying on the caller's thread is faster than handing the batch over from an I/O thread
    // (benchmarks/README.md, "Where the time went"), so there the I/O threads are not started.
    // A batch of megabytes (16 × 150 KB: ~0.5 ms of memcpy) is copied by the I/O threads, ahead,
    // while the caller computes (issue 21: copied on the caller's thread, the staged 150 KB
    // workload reached a lower accelerator utilisation than file reads with an I/O thread).
    // Across nodes they fetch remote samples steps ahead with MPI_Get.
    constexpr std::uint64_t kInlineBatchBytes = std::uint64_t{1} << 20;
    const std::uint64_t batch_bytes = detail::ring_bytes(*d.ring) / d.ring->slots.size();
    const bool plain_loads = d.tier && d.tier->num_nodes() == 1 && batch_bytes <= kInlineBatchBytes;
    d.use_threads = d.options.pipeline.io_threads > 0 && !plain_loads &&
                    (!d.reader().reads_use_mpi() || level == MPI_THREAD_MULTIPLE);
    d.resolve_two_phase();  // `automatic`: measured and agreed here, once
}

detail::SyncTag Loader::Impl::left_tag(detail::SyncKind kind) const {
    detail::SyncTag t;
    t.kind = kind;
    if (diverged) {
        t.left_epoch = detail::kDivergedEpoch;
    } else if (progress.started) {
        t.left_epoch = progress.epoch;
        t.left_step = progress.start.step + progress.consumed;
        t.left_steps = progress.start.step + progress.steps;
    }
    return t;
}

void Loader::Impl::close() {
    if (closed) return;
    closed = true;
    if (active) {  // a range that outlives its loader stops reading and is detached
        EpochRange::Impl* range = active;
        range->shutdown();
        range->loader = nullptr;
        active = nullptr;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // A peer closed in a call that every rank took part in, where this rank got the error.
    if (peer_closed) return;
    comm.set_context({"loader: close", static_cast<std::int64_t>(progress.epoch),
                      static_cast<std::int64_t>(progress.start.step + progress.consumed), "", -1});
    sync(left_tag(detail::SyncKind::close), {}, 0, false);
}

void Loader::close() {
    if (stream_) {
        // Streams: no collective (every rank yields the same steps by construction); the
        // range in flight, if any, ends, and later epoch() calls throw.
        if (stream_->active_range) {
            static_cast<EpochRange::Impl*>(stream_->active_range)->detach_stream();
        }
        stream_->closed = true;
        return;
    }
    impl_->close();
}

void Loader::Impl::close_quietly() noexcept {
    // The destructor's close: a mismatch cannot be thrown from there, so it is printed.
    try {
        close();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mpistage: rank %d: loader destroyed: %s\n", comm.rank(), e.what());
    }
}

Loader::~Loader() {
    if (impl_) impl_->close_quietly();
    if (stream_) close();
}
Loader::Loader(Loader&&) noexcept = default;
Loader& Loader::operator=(Loader&& o) noexcept {
    if (this != &o) {
        if (impl_) impl_->close_quietly();
        if (stream_) close();
        impl_ = std::move(o.impl_);
        stream_ = std::move(o.stream_);
    }
    return *this;
}

std::uint64_t Loader::num_samples() const noexcept {
    return stream_ ? 0 : impl_->num_samples;
}
const EpochTotals& Loader::totals() const noexcept {
    static const EpochTotals unknown{};  // streams: not known in advance
    return stream_ ? unknown : impl_->totals;
}
const LoaderStats& Loader::stats() const noexcept {
    return stream_ ? stream_->stats : impl_->stats;
}
const LoaderOptions& Loader::options() const noexcept {
    return stream_ ? stream_->loader_options : impl_->options;
}
void Loader::set_cuda_stream(void* cuda_stream) noexcept {
    LoaderOptions& o = stream_ ? stream_->loader_options : impl_->options;
    o.delivery.cuda_stream = cuda_stream;
    detail::DeviceStager* stager = stream_ ? stream_->stager.get() : impl_->stager.get();
    if (stager) stager->set_consumer_stream(cuda_stream);
}
const Communicator& Loader::comm() const noexcept {
    return stream_ ? stream_->comm : impl_->comm;
}

EpochRange Loader::epoch(std::uint64_t e, EpochOptions eo) {
    if (stream_) return stream_epoch(e, eo);
    Impl& d = *impl_;
    if (d.closed || d.peer_closed) {  // known on every rank alike (see Impl::sync)
        throw ConfigError(
            "loader: epoch " + std::to_string(e) + " requested after the loader " +
            (d.closed ? std::string("was closed") : "was closed on a peer: " + d.divergence));
    }
    // The step an epoch starts at (0, or the resumed step) names where a stuck rank waits.
    d.comm.set_context({"loader: epoch start", static_cast<std::int64_t>(e),
                        static_cast<std::int64_t>(d.start_of(e).step), "", -1});
    // One tagged agreement: the same epoch and options everywhere, every rank left the last
    // epoch at the same step, and no rank is still inside it (or closing the loader).
    detail::SyncTag tag = d.left_tag(detail::SyncKind::start);
    tag.epoch = e;
    tag.step = eo.max_steps;
    d.sync(tag, capture([&] {
               if (d.epoch_active) {
                   throw ConfigError("loader: epoch " + std::to_string(e) +
                                     " requested while another epoch of this loader is still "
                                     "in flight");
               }
           }),
           0, false);
    d.diverged = false;
    auto impl = std::make_unique<EpochRange::Impl>();
    impl->loader = &d;
    impl->epoch = e;
    const EpochStart start = d.start_of(e);
    // The digest before the plan's first step: the resumed state's (checked by restore), or
    // the epoch's seed (nothing consumed).
    std::uint64_t digest_base = detail::consumed_digest_seed(e);
    if (d.resume && d.resume->epoch == e) {
        (void)detail::digest_from_hex(d.resume->consumed_digest, digest_base);
    }
    d.resume.reset();
    run_agreed(d.comm, [&] {
        impl->plan = d.plan_of(e, start);
        impl->totals = impl->plan.totals;
        // Budget batches: the plan's largest batch (the same on every rank) may exceed the
        // ring's slots; the ring is then reallocated (batches still held keep the old one).
        if (impl->plan.batch_size > d.ring->batch_capacity) {
            d.allocate_ring(
                impl->plan.batch_size,
                std::max<std::uint64_t>(
                    1, std::min<std::uint64_t>(d.options.pipeline.prefetch, impl->plan.steps)));
        }
    });
    impl->limit = eo.max_steps > 0 ? std::min(eo.max_steps, impl->plan.steps) : impl->plan.steps;
    d.progress = Impl::Progress{};
    d.progress.started = true;
    d.progress.epoch = e;
    d.progress.start = start;
    d.progress.steps = impl->plan.steps;
    d.progress.job_samples_before = impl->plan.job_samples_before;
    d.progress.digest_before = {digest_base};
    if (impl->limit > 0) d.cover_digest(impl->plan, 1);  // every rank is here (agreed above)
    detail::StepReader step_reader;
    if (d.stats.two_phase) {  // collective: agreed at construction
        step_reader = detail::two_phase_step_reader(d.comm, d.source, d.num_samples, d.options.plan,
                                                    e, start, impl->plan);
    }
    // Shuffle::chunks from the files: chunks read ahead in the plan's order, within the budget
    // (a memory tier or two-phase reads serve the epoch without it).
    const Source* reader = &d.reader();
    if (d.options.plan.shuffle == Shuffle::chunks && !d.tier && !d.stats.two_phase &&
        impl->limit > 0 && detail::ChunkReadAhead::supports(d.source)) {
        if (!d.chunk_pool) d.chunk_pool = std::make_shared<detail::ChunkPool>(d.read_ahead_budget);
        // The depth the last epoch reached (reads in flight), from the start: an epoch's first
        // window is read while nothing is resident, where a ramp from the I/O threads would wait.
        const std::size_t depth = std::max<std::size_t>(
            {1, d.options.pipeline.io_threads,
             static_cast<std::size_t>(d.stats.read_ahead.readers)});
        impl->read_ahead = std::make_unique<detail::ChunkReadAhead>(
            d.source, impl->plan, impl->limit, d.options.plan.chunk_samples, d.read_ahead_budget,
            depth, d.options.safety.timeout, d.chunk_pool);
        reader = impl->read_ahead.get();
    }
    // Reads from the memory tier fall back to the source: the promise is kept from the file.
    impl->prefetch = std::make_unique<detail::Prefetcher>(
        d.ring, *reader, impl->plan, e, std::move(step_reader), d.tier ? &d.source : nullptr);
    std::uint64_t lag = 0;
    std::uint64_t group = 1;
    detail::window_shape(d.min_prefetch, impl->limit, d.stats.two_phase, lag, group);
    // Reads from the memory tier are promised: staging already read and checked every byte.
    d.windows.reset(lag, group, d.tier != nullptr && !d.stats.two_phase, impl->limit);
    d.epoch_active = true;
    d.active = impl.get();
    EpochRange range(std::move(impl));
    // No more threads than batches, started after the epoch's collectives (a thread reading
    // beside a collective delays it on shared cores: 1-2.5 ms per epoch start here, issue 21);
    // one that cannot start is not agreed on (`Prefetcher::start`).
    EpochRange::Impl* raw = range.impl_.get();
    const std::uint64_t count =
        d.use_threads ? std::min<std::uint64_t>(d.options.pipeline.io_threads, raw->plan.steps) : 0;
    (void)raw->prefetch->start(count);
    return range;
}

}  // namespace mpistage
