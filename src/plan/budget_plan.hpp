#pragma once
// Internals of the budget planner (src/plan/budget_plan.cpp), pure and tested serially:
// packing an order of samples into budget batches and their padding waste. `plan_epoch` with
// `PlanOptions::budget` is the entry point; these are its parts.

#include <cstdint>
#include <functional>
#include <vector>

#include "mpistage/plan.hpp"
#include "plan/batch_fitter.hpp"

namespace mpistage::detail {

/// Cost of sample `id`; a pure function of `id`, the same on every rank.
using SampleCostFn = std::function<SampleCost(std::uint64_t)>;

/// One budget batch.
struct BudgetBatch {
    /// Sample ids in yield order (≥ 1 entry).
    std::vector<std::uint64_t> ids;
    /// Sum of the samples' bytes.
    std::uint64_t size_bytes = 0;
    /// True when the batch is one sample over the budget (its own batch).
    bool oversize = false;
};

/// Packs `order` (sample ids in yield order) into batches under `budget`, in order: a batch
/// takes samples while they fit; a sample over the budget on its own is an oversize batch.
/// With `bucket_window` > 1 the samples of each window are sorted by length first. Pure.
/// @throws ConfigError for an inactive budget or `max_batch_samples` 0.
std::vector<BudgetBatch> pack_budget_batches(const std::vector<std::uint64_t>& order,
                                             const BatchBudget& budget, const SampleCostFn& cost);

/// Padding of `batches` (see PaddingWaste). Pure.
PaddingWaste padding_waste(const std::vector<BudgetBatch>& batches, const BatchBudget& budget,
                           const SampleCostFn& cost);

/// Fills `plan` (ids, valid, offsets, oversize, totals, budget report, job_samples_before) of
/// `rank` for epoch `epoch` from `start` under `options.budget`. Pure.
/// @throws ConfigError as `plan_epoch`.
void plan_budget(std::uint64_t num_samples, int world_size, int rank, const PlanOptions& options,
                 std::uint64_t epoch, const EpochStart& start, const SampleCostFn& cost,
                 EpochPlan& plan);

}  // namespace mpistage::detail
