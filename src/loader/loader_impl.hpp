#pragma once
// The private state of Loader and EpochRange, shared by loader.cpp and epoch_range.cpp.

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/loader.hpp"
#include "pipeline/prefetch.hpp"
#include "pipeline/ring.hpp"
#include "tier/memory_tier.hpp"

namespace mpistage {

struct Loader::Impl {
    Communicator comm;
    const Source& source;
    LoaderOptions options;
    std::uint64_t num_samples = 0;
    EpochTotals totals;
    LoaderStats stats;
    std::shared_ptr<detail::Ring> ring;
    bool use_threads = false;
    bool epoch_active = false;
    /// LoaderState::dataset_fingerprint of the source (computed at construction).
    std::string dataset_fingerprint;
    std::uint64_t skipped_records = 0;
    /// The epoch most recently started: where it started and the batches returned since.
    struct Progress {
        bool started = false;
        std::uint64_t epoch = 0;
        EpochStart start;
        std::uint64_t consumed = 0;
        std::uint64_t steps = 0;
        /// Budget batches: `EpochPlan::job_samples_before` of the epoch's plan.
        std::vector<std::uint64_t> job_samples_before;
    } progress;
    /// Budget batches: the sample costs the planner packs by (built at construction).
    SampleBytesFn sample_bytes;
    SampleTokensFn sample_tokens;
    /// Set by `restore` until the next `epoch()` call.
    std::optional<LoaderState> resume;
    /// The memory tier when `options.stage` staged the data (destroyed, collectively, first).
    std::unique_ptr<detail::MemoryTier> tier;

    /// What the pipeline reads from: the memory tier when staged, else the source.
    const Source& reader() const noexcept {
        return tier ? static_cast<const Source&>(*tier) : source;
    }

    Impl(const Communicator& c, const Source& s, LoaderOptions o)
        : comm(c.get()), source(s), options(std::move(o)) {}

    /// Collective: every option that decides the sequence (and the dataset's metadata) is
    /// the same on every rank.
    void require_same_options() const;
    /// Collective: the byte-range cut and the skew-correction statistics.
    void compute_cut();
    /// Not collective: allocates the ring of `slots` slots of `batch_capacity` samples each
    /// (checked against the node's memory).
    void allocate_ring(std::uint64_t batch_capacity, std::uint64_t slots);
    /// Not collective: the cost functions of a batch budget (`sample_bytes`, `sample_tokens`).
    /// @throws ConfigError for a token field that is not the source's only ragged field.
    void make_cost_functions();
    /// Not collective: the plan of `epoch` from `start` on this rank (pure).
    EpochPlan plan_of(std::uint64_t epoch, const EpochStart& start) const;
    /// Collective: checks `state` against this loader (see Loader::restore) and keeps it.
    void apply_resume(const LoaderState& state);
    /// Collective: `skipped_records` and `dataset_fingerprint` at `options.fingerprint`
    /// (`detail::dataset_fingerprint`).
    void record_identity();
    /// Where epoch `e` starts (a pending resume of epoch e, else the beginning).
    EpochStart start_of(std::uint64_t e) const;
};

struct EpochRange::Impl {
    using Clock = std::chrono::steady_clock;
    Loader::Impl* loader = nullptr;
    EpochPlan plan;
    EpochTotals totals;
    std::uint64_t epoch = 0;
    std::unique_ptr<detail::Prefetcher> prefetch;
    // Consumer only:
    std::uint64_t next_consume = 0;
    /// Slots taken from the prefetcher for steps next_consume, next_consume + 1, ... in order,
    /// each with its read's outcome; the first `agreed` of them every rank holds ready and
    /// error-free (one agreement covers them all: see `next`).
    std::deque<std::pair<detail::Slot*, LocalStatus>> taken;
    std::size_t agreed = 0;
    Clock::time_point started{};
    bool finished = false;

    void shutdown() noexcept {
        // A range left before its end (a stop, an error) still counts its time.
        if (!finished && next_consume > 0 && loader) {
            loader->stats.epoch_time += Clock::now() - started;
            finished = true;
        }
        if (prefetch) {
            for (auto& t : taken) {
                if (t.first) prefetch->ring()->release(t.first);
            }
            taken.clear();
            agreed = 0;
            prefetch->shutdown();
        }
        if (loader) loader->epoch_active = false;
    }
    /// Collective: takes the slot of step `next_consume` (waiting for it) and every later one
    /// already read, then agrees once on how many of them every rank holds error-free.
    /// @throws the agreed error of the earliest failed step, on every rank.
    void agree_window();
};

}  // namespace mpistage
