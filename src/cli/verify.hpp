#pragma once
// `mpistage stage --verify`: the exactly-once check of one epoch (internal to the CLI).

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"

namespace mpistage::cli {

/// What one epoch yielded on every rank (all vectors indexed by rank).
struct EpochReport {
    std::uint64_t epoch = 0;
    /// Batches each rank yielded.
    std::vector<std::uint64_t> batches;
    /// Valid samples each rank yielded (only with --verify).
    std::vector<std::uint64_t> valid;
    std::uint64_t duplicates = 0;
    std::uint64_t missing = 0;
    std::uint64_t out_of_range = 0;
    /// Distinct valid ids the epoch must yield (under drop: the kept samples).
    std::uint64_t expected = 0;
    /// Equal batch counts and every expected id exactly once.
    bool ok = true;
    /// The epoch was resumed from a saved state (ids of the earlier run included when it kept
    /// an id log: `prior_ids`).
    bool resumed = false;
    std::uint64_t prior_ids = 0;
    /// The run stopped inside this epoch (--stop-after-steps): only duplicates are checked.
    bool interrupted = false;
    /// Per-step byte balance of this rank's plan (global sharding with --balance-steps), and
    /// the same for the unbalanced assignment: worst and mean max/mean ratio over steps.
    double step_ratio_worst = 0;
    double step_ratio_mean = 0;
    double unbalanced_worst = 0;
    double unbalanced_mean = 0;
    /// The tier that served the epoch ("memory", "file" or "stream") and the slowest rank's
    /// seconds.
    std::string tier = "file";
    double seconds = 0;
    /// Steps of the epoch (in this run; equal on every rank), batches with a valid sample and
    /// steps yielding only padding over all ranks, padding slots, batches of one sample over a
    /// budget, and the fewest / most valid samples of a real batch (over all ranks).
    std::uint64_t steps = 0;
    std::uint64_t real_batches = 0;
    std::uint64_t padding_steps = 0;
    std::uint64_t padding_slots = 0;
    std::uint64_t oversize = 0;
    std::uint64_t min_batch_samples = 0;
    std::uint64_t max_batch_samples = 0;
    /// Valid samples over all ranks (in this run).
    std::uint64_t valid_samples = 0;
    /// Budget batches only (else < 0): the plan's padding waste (padding to the longest sample
    /// of a batch, in bytes or tokens) with and without bucketing.
    double padding_waste = -1;
    double unbucketed_padding_waste = -1;
};

/// Collective: the batch counts of every rank for `epoch` (no exactly-once check).
EpochReport count_epoch(const Communicator& comm, std::uint64_t epoch, std::uint64_t batches);

/// What the ids of one epoch must be.
struct Expectation {
    std::uint64_t num_samples = 0;
    /// Distinct valid ids the epoch must yield in all (under drop: the kept samples; of an
    /// interrupted epoch: the ids consumed).
    std::uint64_t expected = 0;
    /// Rank 0 only: ids an earlier run consumed in this epoch before the resume (its --verify
    /// id log); they count with this run's ids.
    const std::vector<std::int64_t>* prior = nullptr;
    /// Every rank: false when ids are not positions 0..num_samples-1 (a stream source of
    /// several sub-streams, ids `(stream << 40) | position`): only contents are checked.
    bool positions = true;
    /// Every rank: true when rows are also checked by content (streams): the delivered rows'
    /// content hashes must be the multiset `reference` (a row twice or a row not in the
    /// snapshot counts as a duplicate, a row never delivered as missing).
    bool content = false;
    /// Rank 0 with `content`: the sorted content hashes of every row of the pass.
    const std::vector<std::uint64_t>* reference = nullptr;
    /// With `content`: only part of the pass ran here (resumed or interrupted), so rows not
    /// delivered are not counted missing.
    bool partial = false;
};

/// Collective: gathers the valid ids of every rank on rank 0, counts each id (with the prior
/// run's) and broadcasts the verdict, so every rank returns the same report. `ids` are this
/// rank's valid sample ids; `hashes` (with `Expectation::content`) the content hashes of the
/// same samples. @throws ConfigError when the epoch has more than 2^31-1 valid ids (same on
/// every rank); MpiError.
EpochReport verify_epoch(const Communicator& comm, std::uint64_t epoch,
                         const std::vector<std::int64_t>& ids, std::uint64_t batches,
                         const Expectation& expect,
                         const std::vector<std::uint64_t>* hashes = nullptr);

/// Collective: every rank's `ids`, concatenated in rank order on rank 0 (empty elsewhere).
/// @throws ConfigError (same on every rank) above 2^31-1 ids in all; MpiError.
std::vector<std::int64_t> gather_to_root(const Communicator& comm,
                                         const std::vector<std::int64_t>& ids);

}  // namespace mpistage::cli
