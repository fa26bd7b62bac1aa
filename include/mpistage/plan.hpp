#pragma once
/// @file
/// The planner: a pure function from (N, world size, rank, options, epoch) to the rank's ordered
/// list of batch slots. It makes no MPI calls, so serial tests can simulate any world size; the
/// loader feeds it the collectively agreed N (see docs/architecture.md, plan).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/hash.hpp"

namespace mpistage {

namespace detail {
struct SlotRule;
}

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
    /// A locality-aware shuffle for data larger than memory (with `global`): chunks of
    /// `chunk_samples` contiguous samples permuted per epoch, dealt to the ranks, and each
    /// rank's samples shuffled inside windows of `window_chunks` chunks (CorgiPile's two-level
    /// shuffle, Xu et al., SIGMOD 2022; docs/shuffle.md). The order depends on the world size
    /// the epoch started at (`EpochStart::order_world_size`); rank r's slot j of a global batch
    /// is its position r + j·W (strided), so each rank reads only its own chunks. With a
    /// batch budget each rank's part is packed into batches in position order, batch j of
    /// part r being entry j·P + r of the epoch's batch list (P the order's world size).
    chunks,
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

/// Budget batches: a batch holds as many samples as fit a byte or token budget instead of a
/// fixed count (docs/architecture.md, "Budget batches"). Active when `batch_bytes` or
/// `batch_tokens` is set. Every rank must pass the same values.
struct BatchBudget {
    /// Byte budget of a batch: the sum of `Source::sample_bytes` (payload bytes of all fields)
    /// of its samples; 0 = off.
    std::uint64_t batch_bytes = 0;
    /// Token budget of a batch: samples × the batch's longest sample in tokens (what a trainer
    /// padding to the longest sample computes on), for files and streams alike; 0 = off.
    std::uint64_t batch_tokens = 0;
    /// Most samples in one batch (≥ 1), whatever the budget.
    std::uint64_t max_batch_samples = 4096;
    /// Length bucketing: the samples that `bucket_window` consecutive batches would hold are
    /// sorted by length (tokens with a token budget, else bytes; ties by order) and batched
    /// again, so similar lengths share a batch and padding shrinks. 0 or 1 = off.
    std::uint64_t bucket_window = 0;
    /// With a token budget: index (in `Source::fields()`) of the ragged field whose length in
    /// elements counts as tokens. The loader computes a sample's tokens from
    /// `Source::sample_bytes` minus the fixed fields, divided by the element size, so the
    /// source must have no other ragged field: exact for raw TFRecord payloads; for decoded
    /// `tf.train.Example` features it counts the encoded record.
    std::size_t token_field = 0;

    /// True when a budget is set (batches are sized by it, not by `PlanOptions::batch_size`).
    bool active() const noexcept { return batch_bytes > 0 || batch_tokens > 0; }
    /// Local: the options as text (for option agreement and fingerprints).
    std::string describe() const;
};

/// Options that decide the sample sequence. Every rank must pass the same values.
struct PlanOptions {
    /// Samples per batch on each rank (B). Must be ≥ 1. Not used with a `budget`.
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
    /// Budget batches instead of `batch_size` samples per batch (see BatchBudget). Then every
    /// sample of the epoch is in exactly one batch of one rank and `remainder` is not used:
    /// ranks with fewer batches than the epoch's steps yield masked padding batches of one
    /// slot (index kPaddingId, valid 0). `byte_range` packs each rank's shard in its order;
    /// `global` packs the whole epoch order (independent of W) and deals batch k to rank
    /// k mod W.
    BatchBudget budget;
    /// `Shuffle::chunks` only: samples per chunk (C, contiguous ids read together) and chunks
    /// per window (K, the samples shuffled together on one rank: K·C). 0 in a Loader's options:
    /// derived from the memory budget (`LoaderOptions::tier.budget_bytes`, docs/shuffle.md);
    /// the planner needs both ≥ 1.
    std::uint64_t chunk_samples = 0;
    std::uint64_t window_chunks = 0;

    /// One switch for a global shuffle, as PyTorch's `DistributedSampler(shuffle=True)`: sets
    /// `sharding` and `shuffle` to `global`, so every epoch is a permutation of all N samples
    /// seeded by (seed, epoch), cut into global batches of W·B (the sequence does not depend
    /// on W; a saved state resumes at any W). Local, no I/O. Returns `*this` for chaining.
    PlanOptions& shuffle_globally() noexcept {
        sharding = Sharding::global;
        shuffle = Shuffle::global;
        return *this;
    }

    /// @throws ConfigError for a zero batch size, a shuffle that does not fit the sharding,
    ///         `balance_steps` with `byte_range` sharding or with a budget, or a budget with
    ///         `max_batch_samples` 0; `chunks` with `balance_steps` (it moves samples
    ///         across ranks' chunks), or chunk parameters with another shuffle.
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

/// Padding counts of a set of budget batches, in the budget's unit (tokens with a token
/// budget, else bytes): `padded_units` = Σ over batches of (longest sample × count − sum of
/// samples), `slot_units` = Σ longest sample × count. Padding waste = padded_units / slot_units.
struct PaddingWaste {
    std::uint64_t padded_units = 0;
    std::uint64_t slot_units = 0;
    /// padded_units / slot_units (0 when there are no batches).
    double ratio() const noexcept;
};

/// Report of a budget plan over all ranks and the whole epoch (identical on every rank).
struct BudgetTotals {
    /// Real (non-padding) batches, padding steps (Σ over ranks of steps − own batches) and
    /// batches of one sample over the budget.
    std::uint64_t batches = 0;
    std::uint64_t padding_steps = 0;
    std::uint64_t oversize_batches = 0;
    /// The fewest and most samples in a real batch.
    std::uint64_t min_batch_samples = 0;
    std::uint64_t max_batch_samples = 0;
    PaddingWaste waste;
    /// The same waste without bucketing (equal to `waste` when `bucket_window` ≤ 1).
    PaddingWaste unbucketed_waste;
};

/// Counts over all ranks for one epoch (identical on every rank).
struct EpochTotals {
    std::uint64_t steps = 0;
    std::uint64_t valid_samples = 0;
    std::uint64_t padding_slots = 0;
    std::uint64_t dropped_samples = 0;
};

/// One rank's plan for one epoch: `steps` batches. Fixed batches have `batch_size` slots each;
/// budget batches have variable sizes given by `batch_offsets` (see `batch_begin`).
///
/// The slots are either stored (`ids`/`valid`, as `plan_epoch` returns them) or, for fixed
/// batches from `plan_epoch_on_demand`, computed per slot by a rule of O(1) size
/// (`on_demand()`): `slot_id`/`slot_valid` read either form.
struct EpochPlan {
    /// Batches this rank yields; equal on every rank (a pure function of N, W, B, remainder,
    /// or of N, W, the budget and the sample costs).
    std::uint64_t steps = 0;
    /// Fixed batches: slots of every batch (B). Budget batches: the most slots of any batch of
    /// any rank in the whole epoch (≥ 1), which sizes the loader's ring slots.
    std::uint64_t batch_size = 0;
    /// Sample id of each slot, in yield order (`batch_begin(steps)` entries); kPaddingId for
    /// masked slots. Empty when the plan is `on_demand()`.
    std::vector<std::int64_t> ids;
    /// 1 where the slot is a real, first occurrence of its sample in this epoch. Empty when the
    /// plan is `on_demand()`.
    std::vector<std::uint8_t> valid;
    /// Fixed batches of `plan_epoch_on_demand`: the rule that computes each slot's id and
    /// validity (immutable, shared by copies). Null when `ids`/`valid` hold every slot.
    std::shared_ptr<const detail::SlotRule> rule;
    /// Budget batches: `steps + 1` offsets into `ids`/`valid`, step s holding the slots
    /// `[batch_offsets[s], batch_offsets[s+1])`. Empty for fixed batches.
    std::vector<std::uint64_t> batch_offsets;
    /// Budget batches: one entry per step, 1 when the batch is one sample over the budget.
    std::vector<std::uint8_t> oversize;
    /// Budget batches: `steps + 1` entries; entry s = samples of this epoch the whole job has
    /// consumed before step s of this plan (counting a resumed epoch's earlier part), so a
    /// state taken after s steps records entry s. Empty for fixed batches.
    std::vector<std::uint64_t> job_samples_before;
    /// Totals over all ranks of this plan (of a resumed epoch: its remaining part).
    EpochTotals totals;
    /// Budget batches: the report over all ranks and the whole epoch.
    BudgetTotals budget;
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

    /// True for budget batches (variable sizes).
    bool budgeted() const noexcept { return !batch_offsets.empty(); }
    /// True when slots are computed by `rule` instead of stored in `ids`/`valid`.
    bool on_demand() const noexcept { return rule != nullptr; }
    /// Sample id of slot `k` (< batch_begin(steps)) in yield order; kPaddingId for a masked
    /// slot. O(1) time (a permutation evaluation) for on-demand plans. Thread-safe.
    std::int64_t slot_id(std::uint64_t k) const;
    /// True where slot `k` (< batch_begin(steps)) is a real, first occurrence of its sample.
    bool slot_valid(std::uint64_t k) const;
    /// First slot of step `step` (≤ steps) in `ids`/`valid`.
    std::uint64_t batch_begin(std::uint64_t step) const noexcept {
        return budgeted() ? batch_offsets[step] : step * batch_size;
    }
    /// Slots of step `step` (< steps).
    std::uint64_t batch_slots(std::uint64_t step) const noexcept {
        return batch_begin(step + 1) - batch_begin(step);
    }
    /// True when step `step` (< steps) is a budget batch of one sample over the budget.
    bool batch_oversize(std::uint64_t step) const noexcept {
        return step < oversize.size() && oversize[step] != 0;
    }
};

/// Where an epoch's plan starts. A fresh epoch is `{0, 0}`; a resumed one comes from a saved
/// `LoaderState` (include/mpistage/state.hpp).
struct EpochStart {
    /// Batches every rank already yielded in this epoch (numbering of the remaining batches;
    /// with `byte_range` sharding also where the plan resumes, which needs the same W).
    std::uint64_t step = 0;
    /// `global` sharding: positions `[0, position)` of the epoch order were consumed by the
    /// job (at any world size); the plan covers positions from here. ≤ N. With a budget the
    /// order is the batch order (the epoch order with each bucketing window sorted by length)
    /// and `position` must be the end of a batch: the samples of a prefix of the epoch's
    /// W-independent batch list (with `Shuffle::chunks`, of the order's world size, whose
    /// empty entries hold no sample).
    std::uint64_t position = 0;
    /// `Shuffle::chunks`: the world size the epoch's order was made for (the epoch's first
    /// run; a saved state's `order_world_size`); 0: the planning world size.
    int order_world_size = 0;
};

/// Bytes of sample `id` (for `PlanOptions::balance_steps`, byte-balance reports and byte
/// budgets). Must be a pure function of `id`, identical on every rank.
using SampleBytesFn = std::function<std::uint64_t(std::uint64_t)>;
/// Tokens of sample `id` (for token budgets). Pure, identical on every rank.
using SampleTokensFn = std::function<std::uint64_t(std::uint64_t)>;

/// Start of each rank's shard for `byte_range` after skew correction: rank r owns
/// `[begin[r], begin[r+1])`, with N/W samples plus one for the first N mod W ranks.
/// Returns W+1 entries. @throws ConfigError when world_size < 1.
std::vector<std::uint64_t> balanced_shard_begins(std::uint64_t num_samples, int world_size);

/// Totals of an epoch of fixed batches (those of budget batches come with their plan,
/// `EpochPlan::totals`). Pure. @throws ConfigError for N = 0, world_size < 1 or a budget.
EpochTotals plan_totals(std::uint64_t num_samples, int world_size, const PlanOptions& options);

/// Totals of the part of an epoch that starts at `start` (all ranks; `valid_samples` counts
/// only the remaining part). Pure.
/// @throws ConfigError for N = 0, world_size < 1, a `start` beyond the epoch (byte_range: more
///         steps than the epoch has; global: a position > N), or a budget.
EpochTotals plan_totals(std::uint64_t num_samples, int world_size, const PlanOptions& options,
                        const EpochStart& start);

/// The plan of `rank` for `epoch`. Pure and deterministic: depends only on its arguments.
/// Memory O(N/W + B) (9 bytes per slot of the rank's share: int64 id + uint8 valid); see
/// `plan_epoch_on_demand` for the same plan in O(W) memory.
/// @throws ConfigError for N = 0, world_size < 1, rank outside [0, W).
EpochPlan plan_epoch(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch);

/// The plan of `rank` for the rest of `epoch` from `start` (see EpochStart). With the same W
/// as the run that consumed `start`, the batches are exactly the uninterrupted plan's
/// remaining ones; with another W (`global` sharding only) they hold exactly the samples at
/// positions ≥ start.position, each once, in equal batch counts. `sample_bytes` is required
/// when `options.balance_steps` is set, and optional otherwise (it only fills the byte-balance
/// report).
///
/// With a budget (`options.budget`) the plan has budget batches: `sample_bytes` is required,
/// and `sample_tokens` with a token budget. `byte_range` resumes at `start.step` (same W);
/// `global` resumes after the prefix of the W-independent batch list that holds
/// `start.position` samples and deals the remaining batches in turn from rank 0, so with the
/// same W the batches are exactly the uninterrupted plan's remaining ones. Every rank's batch
/// count is needed for the step count, so a budget plan costs O(N) calls of `sample_bytes`
/// (and `sample_tokens`) and O(N/W) memory (O(N) with `global`).
///
/// Pure. @throws ConfigError as `plan_totals` (except for the budget), and for a rank outside
/// [0, W), `balance_steps` without `sample_bytes`, a budget without the cost functions it
/// needs, or a budget `start.position` that is not the end of a batch.
EpochPlan plan_epoch(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch, const EpochStart& start,
                     const SampleBytesFn& sample_bytes = {},
                     const SampleTokensFn& sample_tokens = {});

/// `plan_epoch` (same arguments, same slots) whose fixed batches are not stored but computed
/// per slot (`EpochPlan::on_demand`, `slot_id`, `slot_valid`): O(W) memory and time instead of
/// O(N/W), so a loader's bookkeeping stays flat in N (docs/architecture.md, "Memory per
/// rank"). Budget batches, and global plans given `sample_bytes` (the per-step byte balance and
/// its report), are stored as by `plan_epoch`. Pure. @throws as `plan_epoch`.
EpochPlan plan_epoch_on_demand(std::uint64_t num_samples, int world_size, int rank,
                               const PlanOptions& options, std::uint64_t epoch,
                               const EpochStart& start, const SampleBytesFn& sample_bytes = {},
                               const SampleTokensFn& sample_tokens = {});

/// Every rank's sample ids of step `step` (0 = the first step of the plan from `start`) of
/// `epoch` with `global` sharding: W·B entries, rank r's batch at [r·B, (r+1)·B) in its yield
/// order, so entry r·B + j equals `plan_epoch(N, W, r, options, epoch, start, sample_bytes)
/// .ids[step·B + j]` (kPaddingId for masked slots). Used by the two-phase reads, where every
/// rank must know who consumes each sample of a step. Memory O(W·B) (8 bytes a slot, plus
/// 24 bytes a slot with `balance_steps`); time O(W·B), O(W·B log(W·B)) with `balance_steps`.
/// Pure. @throws ConfigError as `plan_epoch`, for `byte_range` sharding, a budget, and for a
/// step ≥ the steps of the plan.
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
    /// mix64(key_ + round) of the four Feistel rounds, computed once (the same values the
    /// rounds always used: the permutation is unchanged).
    std::uint64_t round_keys_[4] = {};
};

/// The key of the permutation of `epoch` (salt 0: global order; salt r+1: rank r's local
/// shard). Pure.
std::uint64_t epoch_permutation_key(const PlanOptions& options, std::uint64_t epoch,
                                    std::uint64_t salt);

/// A string identifying everything that decides the sequence; ranks compare its hash once.
std::string plan_fingerprint(std::uint64_t num_samples, int world_size, const PlanOptions& options);

}  // namespace mpistage
