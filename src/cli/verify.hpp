#pragma once
// `mpistage stage --verify`: the exactly-once check of one epoch (internal to the CLI).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/shuffle_quality.hpp"
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
    /// Each rank's part of the epoch, indexed by rank (cli/report.hpp, note_epoch_ranks).
    struct RankTimes {
        /// Seconds the rank spent in the epoch, of them waiting in `next()` (all causes), for
        /// its own reads and for other ranks in collectives.
        double seconds = 0;
        double wait_seconds = 0;
        double wait_io_seconds = 0;
        double wait_peers_seconds = 0;
    };
    std::vector<RankTimes> ranks;
    /// The rank that made the others wait the most: the one with the most time not spent
    /// waiting for peers (seconds − wait_peers_seconds), which the others' peer waits wait
    /// for; −1 with one rank. `others_waited_seconds`: the peer waits of the other ranks.
    int waited_on_rank = -1;
    double others_waited_seconds = 0;
    /// FILE input: how close the epoch's order came to a full shuffle (cli/shuffle_quality.hpp).
    std::optional<ShuffleFigure> shuffle;
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
    /// Every rank: how many ids `prior` holds on rank 0 (0 without a prior run).
    std::uint64_t prior_count = 0;
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

/// The exactly-once count of one epoch, distributed by id range so that no rank holds O(N):
/// rank r owns the ids `[begin[r], begin[r+1])` of `balanced_shard_begins(N, W)` and keeps
/// one bit per owned id (N/W/8 bytes). Ids are buffered per owner by `add` and sent to their
/// owners by `exchange` (one `Communicator::alltoallv`); an owner counts an id whose bit is
/// already set as a duplicate, so duplicates, out-of-range ids and distinct ids are exact.
/// Ids outside [0, N) are counted where they were added. Not thread-safe.
class IdCount {
public:
    /// Local once `comm` has its node split (agree on the outcome: the check is the same on
    /// every rank of a node); else it makes the split first (`comm.split_node()`, collective),
    /// so callers that construct it inside an agreement split before it, on every rank. `input`
    /// names the input in errors. @throws ConfigError naming the input and the bytes when the
    /// bitmap exceeds this rank's share of the node's memory or cannot be allocated.
    IdCount(const Communicator& comm, std::uint64_t num_samples, const std::string& input);
    /// Local: counts one yielded id (buffered until the next `exchange`).
    void add(std::int64_t id);
    /// Ids added on this rank in all.
    std::uint64_t added() const noexcept { return added_; }
    /// Ids buffered on this rank since the last `exchange`.
    std::uint64_t buffered() const noexcept { return buffered_; }
    /// Collective: sends every buffered id to its owner and counts it there. @throws MpiError,
    /// ConfigError (a message of 2 GiB or more, same on every rank).
    void exchange();
    /// Bytes this rank holds for the count (bitmap and buffers' capacity), for reports/tests.
    std::uint64_t memory_bytes() const noexcept;
    /// Local counts of this rank (duplicates and distinct ids among its owned range,
    /// out-of-range ids it was given).
    std::uint64_t duplicates() const noexcept { return duplicates_; }
    std::uint64_t out_of_range() const noexcept { return out_of_range_; }
    std::uint64_t distinct() const noexcept { return distinct_; }
    /// Rank that owns `id` (< N) for `num_samples` and `world_size` (balanced shards). Pure.
    static int owner_of(std::uint64_t id, std::uint64_t num_samples, int world_size) noexcept;

private:
    const Communicator& comm_;
    std::uint64_t num_samples_ = 0;
    std::uint64_t begin_ = 0;
    std::vector<std::uint64_t> bits_;
    std::vector<std::string> outgoing_;
    std::uint64_t buffered_ = 0;
    std::uint64_t added_ = 0;
    std::uint64_t duplicates_ = 0;
    std::uint64_t out_of_range_ = 0;
    std::uint64_t distinct_ = 0;
};

/// Ids buffered by an `IdCount` between two exchanges (at most ~8 MiB of ids a rank): the
/// stage loop exchanges every `exchange_interval(batch_slots)` steps, the same on every rank.
std::uint64_t exchange_interval(std::uint64_t batch_slots) noexcept;

/// Collective: the verdict of `count` (every rank's ids of the epoch added) together with the
/// prior run's ids (`expect.prior`, added from rank 0 in pieces), so every rank returns the
/// same report. O(N/W) memory per rank for ids. With `expect.content`, `hashes` holds the
/// content hashes of this rank's delivered rows; they are gathered on rank 0 and compared
/// with `expect.reference` as multisets (O(rows) on rank 0: streams only).
/// @throws MpiError, ConfigError (same on every rank).
EpochReport verify_epoch(const Communicator& comm, std::uint64_t epoch, IdCount& count,
                         std::uint64_t batches, const Expectation& expect,
                         const std::vector<std::uint64_t>* hashes = nullptr);

/// Collective: every rank's `ids`, concatenated in rank order on rank 0 (empty elsewhere).
/// @throws ConfigError (same on every rank) above 2^31-1 ids in all; MpiError.
std::vector<std::int64_t> gather_to_root(const Communicator& comm,
                                         const std::vector<std::int64_t>& ids);

}  // namespace mpistage::cli
