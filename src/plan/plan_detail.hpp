#pragma once
// Internals of the planner shared by plan.cpp (options, totals, byte_range) and
// global_plan.cpp (global sharding, per-step byte balance).

#include <cstdint>
#include <memory>
#include <utility>

#include "mpistage/plan.hpp"
#include "plan/chunk_order.hpp"

namespace mpistage::detail {

/// How the slots of a fixed-batch plan are computed, one at a time (EpochPlan::rule): the
/// loops of `plan_byte_range` and `plan_global` (without sample sizes) as a function of the
/// slot number. O(1) size.
struct SlotRule {
    enum class Kind { byte_range, global };
    Kind kind = Kind::byte_range;
    std::uint64_t num_samples = 0;
    std::uint64_t batch_size = 1;
    bool shuffle = false;
    bool mask = false;
    Permutation perm{1, 0};
    // byte_range: slot k is epoch slot `skip + k` of the rank; the first `real` epoch slots
    // are its shard from `shard_begin` (permuted with `perm` when shuffled), the rest padding
    // numbered from `pad_before` (the padding slots of the lower ranks).
    std::uint64_t skip = 0;
    std::uint64_t real = 0;
    std::uint64_t shard_begin = 0;
    std::uint64_t pad_before = 0;
    // global: slot s·B + j is epoch position `position + s·width + rank_offset + j·slot_stride`
    // (contiguous rank slices: rank_offset r·B, stride 1; Shuffle::chunks: r and W), the id
    // there `chunks->id_at` with the chunk order, else `perm` when shuffled.
    std::uint64_t position = 0;
    std::uint64_t width = 0;
    std::uint64_t rank_offset = 0;
    std::uint64_t slot_stride = 1;
    std::shared_ptr<const ChunkOrder> chunks;

    /// (id, valid) of slot `k`.
    std::pair<std::int64_t, bool> at(std::uint64_t k) const;
};

/// @throws ConfigError for world_size < 1 or N = 0.
void check_world(std::uint64_t num_samples, int world_size);
std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b);

/// Sets `plan.rule` and `plan.shard_*` of `rank` for byte_range sharding, skipping the first
/// `first_step` batches; `plan.steps` and `batch_size` are set by the caller.
void plan_byte_range(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch, std::uint64_t first_step,
                     EpochPlan& plan);

/// Sets `plan.rule` of `rank` for global sharding from epoch position `start.position` (the
/// chunk order of `start.order_world_size`); with
/// `sample_bytes`, fills `plan.ids/valid` and the byte-balance report instead (balanced with
/// `options.balance_steps`).
void plan_global(std::uint64_t num_samples, int world_size, int rank, const PlanOptions& options,
                 std::uint64_t epoch, const EpochStart& start, const SampleBytesFn& sample_bytes,
                 EpochPlan& plan);

}  // namespace mpistage::detail

namespace mpistage::detail {

/// Stores every slot of an on-demand plan in `ids`/`valid` and drops the rule.
void materialize(EpochPlan& plan);

}  // namespace mpistage::detail
