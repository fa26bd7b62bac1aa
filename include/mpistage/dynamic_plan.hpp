#pragma once
/// @file
/// Dynamic batching for files: batches hold as many samples as fit a byte or token budget
/// (the same vocabulary as `StreamOptions::batch_bytes` / `batch_tokens`), optionally sorted by
/// length within windows of batches, with the same number of steps on every rank. The planner
/// is a pure function (no MPI): every rank computes every rank's batch count from the sample
/// sizes (`Source::sample_bytes`, identical on every rank), so the step count is agreed by
/// construction and serial tests can simulate any world size.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mpistage/plan.hpp"

namespace mpistage {

/// The budget of one dynamic batch. Every rank must pass the same values.
struct DynamicBatchOptions {
    /// Byte budget of a batch (payload bytes of all fields, `Source::sample_bytes`); 0 = off.
    std::uint64_t batch_bytes = 0;
    /// Token budget of a batch: samples × the batch's longest sample in tokens (what a trainer
    /// padding to the longest sample computes on), as `StreamOptions::batch_tokens`; 0 = off.
    std::uint64_t batch_tokens = 0;
    /// Most samples in one batch (≥ 1), whatever the budget.
    std::uint64_t max_batch_samples = 4096;
    /// Length bucketing: the samples that `bucket_window` consecutive batches would hold are
    /// sorted by length (tokens with a token budget, else bytes; ties by order) and batched
    /// again, so similar lengths share a batch and padding shrinks. 0 or 1 = off.
    std::uint64_t bucket_window = 0;

    /// @throws ConfigError when neither budget is set or `max_batch_samples` is 0.
    void validate() const;
    /// Local: the options as text (for `require_same`).
    std::string describe() const;
};

/// Cost of one sample for a budget: payload bytes and tokens (tokens only matter with a
/// token budget).
struct DynamicSampleCost {
    std::uint64_t size_bytes = 0;
    std::uint64_t tokens = 0;
};

/// Cost of sample `id`; must be the same on every rank and a pure function of `id`.
using DynamicCostFn = std::function<DynamicSampleCost(std::uint64_t)>;

/// One batch of a dynamic plan.
struct DynamicBatch {
    /// Sample ids in yield order (≥ 1 entry).
    std::vector<std::uint64_t> ids;
    /// Sum of the samples' bytes.
    std::uint64_t size_bytes = 0;
    /// True when the batch is one sample over the budget (its own batch).
    bool oversize = false;
};

/// Padding counts of a set of batches, in the budget's unit (tokens with a token budget,
/// else bytes): `padded_units` = Σ over batches of (longest sample × count − sum of samples),
/// `slot_units` = Σ longest sample × count. Padding waste = padded_units / slot_units.
struct PaddingWaste {
    std::uint64_t padded_units = 0;
    std::uint64_t slot_units = 0;
    /// padded_units / slot_units (0 when there are no batches).
    double ratio() const noexcept;
};

/// One rank's dynamic plan of one epoch.
struct DynamicEpochPlan {
    /// Steps every rank yields in this epoch (the largest batch count of any rank).
    std::uint64_t steps = 0;
    /// This rank's batches, in yield order; steps `batches.size() .. steps` are padding
    /// (masked batches of one slot, no sample).
    std::vector<DynamicBatch> batches;
    /// Over all ranks (identical on every rank): real batches, padding steps, oversize
    /// batches, the fewest and most samples in a real batch, and the padding waste.
    std::uint64_t total_batches = 0;
    std::uint64_t total_padding_steps = 0;
    std::uint64_t total_oversize = 0;
    std::uint64_t min_batch_samples = 0;
    std::uint64_t max_batch_samples = 0;
    PaddingWaste waste;
    /// The same waste without bucketing (equal to `waste` when `bucket_window` ≤ 1).
    PaddingWaste unbucketed_waste;
};

/// Packs `order` (sample ids in yield order) into batches under `options`, in order: a batch
/// takes samples while they fit; a sample over the budget on its own is an oversize batch.
/// With `bucket_window` > 1 the samples of each window are sorted by length first. Pure.
std::vector<DynamicBatch> pack_dynamic_batches(const std::vector<std::uint64_t>& order,
                                               const DynamicBatchOptions& options,
                                               const DynamicCostFn& cost);

/// Padding of `batches` (see PaddingWaste). Pure.
PaddingWaste padding_waste(const std::vector<DynamicBatch>& batches,
                           const DynamicBatchOptions& options, const DynamicCostFn& cost);

/// The dynamic plan of `rank` for `epoch`. The sample order comes from `plan` (seed, sharding,
/// shuffle; `batch_size`, `remainder` and `balance_steps` are not used): `byte_range` packs
/// each rank's shard (`balanced_shard_begins`, ascending or shuffled with `local`);
/// `global` packs the whole epoch order (independent of W) and deals batch k to rank k mod W.
/// Every sample is in exactly one batch of one rank; every rank gets the same `steps`.
/// Pure and deterministic in (N, W, options, epoch, cost); costs O(N) calls of `cost` (every
/// rank's batch count is needed for the step count) and O(N/W) memory.
/// @throws ConfigError for N = 0, world_size < 1, a rank outside [0, W), invalid options.
DynamicEpochPlan plan_dynamic_epoch(std::uint64_t num_samples, int world_size, int rank,
                                    const PlanOptions& plan, const DynamicBatchOptions& options,
                                    std::uint64_t epoch, const DynamicCostFn& cost);

}  // namespace mpistage
