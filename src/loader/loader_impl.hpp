#pragma once
// The private state of Loader and EpochRange, shared by loader.cpp and epoch_range.cpp.

#include <chrono>
#include <cstdint>
#include <memory>

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
    /// Not collective: allocates the ring (checked against the node's memory).
    void allocate_ring();
};

struct EpochRange::Impl {
    using Clock = std::chrono::steady_clock;
    Loader::Impl* loader = nullptr;
    EpochPlan plan;
    std::uint64_t epoch = 0;
    std::unique_ptr<detail::Prefetcher> prefetch;
    // Consumer only:
    std::uint64_t next_consume = 0;
    Clock::time_point started{};
    bool finished = false;

    void shutdown() noexcept {
        if (prefetch) prefetch->shutdown();
        if (loader) loader->epoch_active = false;
    }
    /// The batch of `slot` (owning `lease`).
    HostBatch make_batch(const detail::Slot& slot, std::shared_ptr<void> lease) const;
};

}  // namespace mpistage
