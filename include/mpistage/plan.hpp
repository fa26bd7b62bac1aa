#pragma once
/// @file
/// The planner: a pure function from (N, world size, rank, options, epoch) to the rank's ordered
/// list of batch slots. It makes no MPI calls, so serial tests can simulate any world size; the
/// loader feeds it the collectively agreed N (see docs/architecture.md, plan).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mpistage/hash.hpp"

namespace mpistage {

/// How samples are divided among ranks.
enum class Sharding {
    /// Contiguous shards of the byte space (best I/O locality). The cut at r·T/W is snapped to
    /// record boundaries and the skew correction gives every rank N/W or N/W+1 samples.
    byte_range,
    /// Global batches of W·B positions of one epoch-wide order; rank r takes its slice of each.
    /// The sample sequence does not depend on W.
    global,
};

/// How the order changes from epoch to epoch.
enum class Shuffle {
    /// Ascending sample ids.
    none,
    /// A permutation of the rank's own shard (with `byte_range`), seeded by (seed, epoch, rank).
    local,
    /// A permutation of all N samples (with `global`), seeded by (seed, epoch).
    global,
};

/// What happens when samples do not fill equal, full batches on every rank.
enum class Remainder {
    /// Drop the tail so every rank has only full batches (like `drop_last`).
    drop,
    /// Fill missing slots with repeated samples from the head of the dataset (real data, as
    /// PyTorch's DistributedSampler does), flagged `valid = false`.
    pad,
    /// Leave missing slots empty: zero data, index −1, `valid = false`; no I/O is spent on them.
    mask,
};

/// Options that decide the sample sequence. Every rank must pass the same values.
struct PlanOptions {
    /// Samples per batch on each rank (B). Must be ≥ 1.
    std::uint64_t batch_size = 32;
    /// Seed of every shuffle.
    std::uint64_t seed = 0;
    /// How samples are divided among ranks.
    Sharding sharding = Sharding::byte_range;
    /// How the order changes between epochs.
    Shuffle shuffle = Shuffle::none;
    /// What happens to samples that do not fill full batches.
    Remainder remainder = Remainder::drop;
    /// `global` sharding only: inside each global batch of W·B samples, assign samples to ranks
    /// so that the bytes per rank per step are balanced (greedy longest-processing-time with B
    /// slots per rank; Graham 1969). Counts stay equal and the global batch's content is the
    /// same, so exactly-once, determinism and resume hold. Needs the size of every sample
    /// (`Source::sample_bytes`); the plan of an epoch then costs O(N log(W·B)) time per rank.
    bool balance_steps = false;

    /// @throws ConfigError for a zero batch size, a shuffle that does not fit the sharding, or
    ///         `balance_steps` with `byte_range` sharding.
    void validate() const;
};

std::string to_string(Sharding s);
std::string to_string(Shuffle s);
std::string to_string(Remainder r);
/// @throws ConfigError for unknown names.
Sharding parse_sharding(const std::string& s);
Shuffle parse_shuffle(const std::string& s);
Remainder parse_remainder(const std::string& s);

/// Sample id used for an empty (masked) slot.
constexpr std::int64_t kPaddingId = -1;

/// One rank's plan for one epoch: `steps` batches of `batch_size` slots each.
struct EpochPlan {
    /// Batches this rank yields; equal on every rank (a pure function of N, W, B, remainder).
    std::uint64_t steps = 0;
    std::uint64_t batch_size = 0;
    /// Sample id of each slot, `steps * batch_size` entries in yield order; kPaddingId for masked.
    std::vector<std::int64_t> ids;
    /// 1 where the slot is a real, first occurrence of its sample in this epoch.
    std::vector<std::uint8_t> valid;
    /// This rank's owned shard `[shard_begin, shard_end)` (byte_range), for reporting.
    std::uint64_t shard_begin = 0;
    std::uint64_t shard_end = 0;
    /// Step number of the first batch: 0, or `EpochStart::step` of a resumed epoch.
    std::uint64_t first_step = 0;
    /// Per-step byte balance over all ranks (global sharding, when sample sizes were given):
    /// the largest and the mean over steps of (max bytes of a rank) / (mean bytes per rank)
    /// in that step. 1 is perfect; 0 when not computed.
    double worst_step_byte_ratio = 0;
    double mean_step_byte_ratio = 0;
    /// The same for the unbalanced assignment (each rank its contiguous slice), computed with
    /// `balance_steps` for comparison.
    double unbalanced_worst_step_byte_ratio = 0;
    double unbalanced_mean_step_byte_ratio = 0;
};

/// Where an epoch's plan starts. A fresh epoch is `{0, 0}`; a resumed one comes from a saved
/// `LoaderState` (include/mpistage/state.hpp).
struct EpochStart {
    /// Batches every rank already yielded in this epoch (numbering of the remaining batches;
    /// with `byte_range` sharding also where the plan resumes, which needs the same W).
    std::uint64_t step = 0;
    /// `global` sharding: positions `[0, position)` of the epoch order were consumed by the
    /// job (at any world size); the plan covers positions from here. ≤ N.
    std::uint64_t position = 0;
};

/// Bytes of sample `id` (for `PlanOptions::balance_steps` and byte-balance reports).
using SampleBytesFn = std::function<std::uint64_t(std::uint64_t)>;

/// Counts over all ranks for one epoch (identical on every rank).
struct EpochTotals {
    std::uint64_t steps = 0;
    std::uint64_t valid_samples = 0;
    std::uint64_t padding_slots = 0;
    std::uint64_t dropped_samples = 0;
};

/// Start of each rank's shard for `byte_range` after skew correction: rank r owns
/// `[begin[r], begin[r+1])`, with N/W samples plus one for the first N mod W ranks.
/// Returns W+1 entries. @throws ConfigError when world_size < 1.
std::vector<std::uint64_t> balanced_shard_begins(std::uint64_t num_samples, int world_size);

/// Totals of an epoch. Pure. @throws ConfigError for N = 0 or world_size < 1.
EpochTotals plan_totals(std::uint64_t num_samples, int world_size, const PlanOptions& options);

/// Totals of the part of an epoch that starts at `start` (all ranks; `valid_samples` counts
/// only the remaining part). Pure.
/// @throws ConfigError for N = 0, world_size < 1, a `start` beyond the epoch (byte_range: more
///         steps than the epoch has; global: a position > N).
EpochTotals plan_totals(std::uint64_t num_samples, int world_size, const PlanOptions& options,
                        const EpochStart& start);

/// The plan of `rank` for `epoch`. Pure and deterministic: depends only on its arguments.
/// Memory O(N/W + B) (9 bytes per slot of the rank's share: int64 id + uint8 valid).
/// @throws ConfigError for N = 0, world_size < 1, rank outside [0, W).
EpochPlan plan_epoch(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch);

/// The plan of `rank` for the rest of `epoch` from `start` (see EpochStart). With the same W
/// as the run that consumed `start`, the batches are exactly the uninterrupted plan's
/// remaining ones; with another W (`global` sharding only) they hold exactly the samples at
/// positions ≥ start.position, each once, in equal batch counts. `sample_bytes` is required
/// when `options.balance_steps` is set, and optional otherwise (it only fills the byte-balance
/// report). Pure. @throws ConfigError as `plan_totals`, and for a rank outside [0, W) or
/// `balance_steps` without `sample_bytes`.
EpochPlan plan_epoch(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch, const EpochStart& start,
                     const SampleBytesFn& sample_bytes = {});

/// Every rank's sample ids of step `step` (0 = the first step of the plan from `start`) of
/// `epoch` with `global` sharding: W·B entries, rank r's batch at [r·B, (r+1)·B) in its yield
/// order, so entry r·B + j equals `plan_epoch(N, W, r, options, epoch, start, sample_bytes)
/// .ids[step·B + j]` (kPaddingId for masked slots). Used by the two-phase reads, where every
/// rank must know who consumes each sample of a step. Memory O(W·B) (8 bytes a slot, plus
/// 24 bytes a slot with `balance_steps`); time O(W·B), O(W·B log(W·B)) with `balance_steps`.
/// Pure. @throws ConfigError as `plan_epoch`, for `byte_range` sharding, and for a step ≥ the
/// steps of the plan.
std::vector<std::int64_t> global_step_ids(std::uint64_t num_samples, int world_size,
                                          const PlanOptions& options, std::uint64_t epoch,
                                          const EpochStart& start, std::uint64_t step,
                                          const SampleBytesFn& sample_bytes = {});

/// A bijection of [0, n) computable per position in O(1) memory (cycle-walking Feistel network
/// over the next even power of two, 4 rounds of a splitmix64-based round function).
class Permutation {
public:
    Permutation(std::uint64_t n, std::uint64_t key);
    /// Image of position `i` (< n).
    std::uint64_t operator()(std::uint64_t i) const;
    std::uint64_t size() const noexcept { return n_; }

private:
    std::uint64_t n_;
    std::uint64_t key_;
    unsigned half_bits_ = 0;
    std::uint64_t half_mask_ = 0;
};

/// The key of the permutation of `epoch` (salt 0: global order; salt r+1: rank r's local
/// shard). Pure.
std::uint64_t epoch_permutation_key(const PlanOptions& options, std::uint64_t epoch,
                                    std::uint64_t salt);

/// A string identifying everything that decides the sequence; ranks compare its hash once.
std::string plan_fingerprint(std::uint64_t num_samples, int world_size, const PlanOptions& options);

}  // namespace mpistage
