#pragma once
// Internals of the planner shared by plan.cpp (options, totals, byte_range) and
// global_plan.cpp (global sharding, per-step byte balance).

#include <cstdint>

#include "mpistage/plan.hpp"

namespace mpistage::detail {

/// @throws ConfigError for world_size < 1 or N = 0.
void check_world(std::uint64_t num_samples, int world_size);
std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b);

/// Fills `plan.ids/valid/shard_*` of `rank` for byte_range sharding, skipping the first
/// `first_step` batches; `plan.steps` and `batch_size` are set by the caller.
void plan_byte_range(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch, std::uint64_t first_step,
                     EpochPlan& plan);

/// Fills `plan.ids/valid` of `rank` for global sharding from epoch position `position`, and the
/// byte-balance report when `sample_bytes` is given (balanced with `options.balance_steps`).
void plan_global(std::uint64_t num_samples, int world_size, int rank, const PlanOptions& options,
                 std::uint64_t epoch, std::uint64_t position, const SampleBytesFn& sample_bytes,
                 EpochPlan& plan);

}  // namespace mpistage::detail
