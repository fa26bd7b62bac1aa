#pragma once
// The consumed-id digest of a LoaderState (docs/resume.md, "Consumed-id digest"): a seed that
// depends on the epoch plus an order-independent sum (mod 2^64) of a keyed 64-bit hash of
// every sample id consumed in that epoch. The parts below are pure functions of plans and
// positions, so the loader sums them across ranks (each rank its share) and the serial tests
// check them without MPI.

#include <cstdint>
#include <string>
#include <utility>

#include "mpistage/plan.hpp"

namespace mpistage::detail {

/// The digest of epoch `epoch` with nothing consumed: a hash of the epoch, so a state moved to
/// another epoch is told apart even at the epoch's start.
std::uint64_t consumed_digest_seed(std::uint64_t epoch) noexcept;

/// The term of sample `id` consumed in epoch `epoch`: XXH3 64 of the id's 8 little-endian
/// bytes, seeded by the epoch (the same id hashes differently in another epoch, also without
/// a shuffle).
std::uint64_t consumed_term(std::uint64_t id, std::uint64_t epoch) noexcept;

/// Sum of the terms of the valid slots (real, first occurrences) of steps [from, to) of `plan`
/// (to ≤ plan.steps), fixed or budget batches, stored or on demand. O(slots) time, O(1)
/// memory.
std::uint64_t plan_steps_digest(const EpochPlan& plan, std::uint64_t from, std::uint64_t to,
                                std::uint64_t epoch);

/// Sum of the terms of the sample ids [begin, end).
std::uint64_t id_range_digest(std::uint64_t begin, std::uint64_t end, std::uint64_t epoch);

/// Fixed batches, `global` sharding: sum of the terms of the samples at positions
/// [begin, end) (end ≤ N) of the epoch order of `options` (the permutation keyed by seed and
/// epoch with `shuffle = global`, ascending ids otherwise), as `plan_epoch` yields them at any
/// world size; with `shuffle = chunks` the chunk order made for `order_world_size` ranks.
/// O(end − begin) time, O(1) memory.
std::uint64_t global_positions_digest(std::uint64_t num_samples, const PlanOptions& options,
                                      std::uint64_t epoch, std::uint64_t begin, std::uint64_t end,
                                      int order_world_size = 0);

/// Part `part` (< parts) of `parts` (> 0) equal parts of [0, total); the first total mod parts
/// parts hold one more.
std::pair<std::uint64_t, std::uint64_t> part_range(std::uint64_t total, std::uint64_t part,
                                                   std::uint64_t parts);

/// The digest as stored in a state: 16 lowercase hex digits.
std::string digest_to_hex(std::uint64_t digest);
/// Parses 16 hex digits. @returns false when `text` is not exactly 16 hex digits.
bool digest_from_hex(const std::string& text, std::uint64_t& digest) noexcept;

}  // namespace mpistage::detail
