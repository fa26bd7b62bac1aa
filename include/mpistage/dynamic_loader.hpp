#pragma once
/// @file
/// `DynamicLoader`: batches of files sized by a byte or token budget (mpistage/dynamic_plan.hpp)
/// instead of a fixed sample count, with the same number of steps on every rank. It yields the
/// library's `HostBatch`, so `to_torch` and the rest of a trainer consume it unchanged; only
/// `HostBatch::size()` varies from batch to batch.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mpistage/comm.hpp"
#include "mpistage/dynamic_plan.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/source.hpp"

namespace mpistage {

/// Options of a `DynamicLoader`; every rank must pass the same values (checked collectively).
struct DynamicLoaderOptions {
    /// Seed, sharding and shuffle of the sample order (`batch_size`, `remainder` and
    /// `balance_steps` do not apply: the budget decides the batches, every sample is yielded
    /// once, ranks with fewer batches yield masked ones).
    PlanOptions plan;
    /// The budget, the most samples per batch and the bucketing window.
    DynamicBatchOptions batching;
    /// With a token budget: index (in `Source::fields()`) of the ragged field whose length in
    /// elements counts as tokens. The source must have no other ragged field, because a
    /// sample's tokens are computed from `Source::sample_bytes` (minus the fixed fields,
    /// divided by the element size): exact for raw TFRecord payloads; for decoded
    /// `tf.train.Example` features it counts the encoded record.
    std::size_t token_field = 0;
    /// Watchdog deadline of the loader's collectives (see `Communicator`); 0 disables.
    std::chrono::seconds timeout{300};

    /// @throws ConfigError for invalid plan or batching options, or a negative timeout.
    void validate() const;
};

/// Counters of one rank, accumulated over all epochs since construction.
struct DynamicLoaderStats {
    /// Batches yielded, including padding steps.
    std::uint64_t batches = 0;
    /// Steps at which this rank had no batch left and yielded a masked one.
    std::uint64_t padding_steps = 0;
    std::uint64_t valid_samples = 0;
    /// Payload bytes read (sum of `Source::sample_bytes` of the samples yielded).
    std::uint64_t bytes_read = 0;
    /// Batches made of one sample over the budget.
    std::uint64_t oversize_batches = 0;
};

/// Sample costs of `source` under `options` (bytes from `Source::sample_bytes`, tokens as
/// described at `DynamicLoaderOptions::token_field`). Local, no MPI.
/// @throws ConfigError when a token budget names a field that is not ragged, or the source
///         has more than one ragged field.
DynamicCostFn dynamic_cost_function(const Source& source, const DynamicLoaderOptions& options);

/// Yields batches of variable size under a byte or token budget, with equal steps.
///
/// Every rank plans the epoch with `plan_dynamic_epoch` (pure, identical everywhere), so the
/// step count is agreed without communication. `next()` reads the step's samples with
/// `Source::read` on the calling thread, then all ranks agree on the outcome (one allreduce
/// per step): a read error on any rank becomes the same exception on every rank. Ranks with
/// fewer batches than `steps()` yield masked batches of one slot (index −1, valid 0, zero
/// data). Resident memory: one batch plus the plan's O(N/W) ids (O(N) with `global`).
/// Move-only; one thread at a time.
class DynamicLoader {
public:
    /// Collective: checks the options and the dataset agree on every rank.
    /// @throws ConfigError (agreed) for invalid or differing options, an empty source.
    DynamicLoader(const Communicator& comm, const Source& source, DynamicLoaderOptions options);
    ~DynamicLoader();
    DynamicLoader(DynamicLoader&&) noexcept;
    DynamicLoader& operator=(DynamicLoader&&) noexcept;

    /// Collective (agreed): plans `epoch`; the following `next()` calls yield its batches.
    void start_epoch(std::uint64_t epoch);
    /// Collective: the next batch of the epoch into `out`; false (on every rank at once) after
    /// `steps()` batches. @throws the same Error on every rank when any rank's read failed.
    bool next(HostBatch& out);
    /// Steps of the current epoch (equal on every rank).
    std::uint64_t steps() const noexcept;
    /// True when the last batch is one sample over the budget.
    bool last_oversize() const noexcept;
    /// The plan of the current epoch (this rank's batches and the totals over all ranks).
    const DynamicEpochPlan& plan() const noexcept;
    /// Samples in the dataset (agreed).
    std::uint64_t num_samples() const noexcept;
    const DynamicLoaderStats& stats() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mpistage
