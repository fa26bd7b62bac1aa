#pragma once
// Pure decisions of the stream loader, identical on every rank given the same inputs (tested
// serially for any world size): who reads which stream, who owns which chunk, which positions a
// resumed state has consumed, which samples form a batch, and who sends how many items to whom.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "loader/stream/stream_config.hpp"
#include "plan/batch_fitter.hpp"

namespace mpistage::detail {

/// Rank that reads each stream under `source` sharding: largest weight first (ties: lower
/// stream index) to the rank with the least weight so far (ties: lower rank).
std::vector<int> assign_streams(const std::vector<double>& weights, int world_size);

/// Rank owning position `position` of stream `stream` under chunks of `chunk_size`.
int chunk_owner(std::uint64_t stream, std::uint64_t position, std::uint64_t chunk_size,
                int world_size);

/// Which positions of one stream a rank reads: its own chunks (or all, `chunk_size` 0) minus
/// those a resumed state marks consumed; `by_key`: of those, the items whose key it owns
/// (mix64(key) mod W, `hash` sharding reading keys).
class PositionFilter {
public:
    PositionFilter() = default;
    /// `chunk_size` 0: every position is this rank's (before the key test of `by_key`).
    PositionFilter(std::uint64_t stream, std::uint64_t chunk_size, int rank, int world_size,
                   StreamPosition resumed, bool by_key = false);
    /// The first position ≥ `p` this rank must read (or, `by_key`, test the key of).
    std::uint64_t next_wanted(std::uint64_t p) const;
    /// True when a resumed state says `p` was already yielded.
    bool consumed(std::uint64_t p) const;
    /// True when this rank keeps the item at position `p` with key `key`: not consumed and,
    /// `by_key`, owned by this rank (positions outside `next_wanted` are never asked).
    bool keeps(std::uint64_t p, std::uint64_t key) const;
    bool by_key() const { return by_key_; }

private:
    std::uint64_t stream_ = 0;
    std::uint64_t chunk_size_ = 0;
    int rank_ = 0;
    int world_size_ = 1;
    StreamPosition resumed_;
    bool by_key_ = false;
};

/// The limits of one stream batch: `batch_size` samples, `batch_bytes`, `batch_tokens`.
BatchLimits batch_limits(const StreamConfig& o);

/// Length bucket of a sample (index into `length_buckets`, one past for longer samples; 0
/// without buckets). Length is tokens with a token budget, else bytes.
std::size_t bucket_of(const SampleCost& c, const StreamConfig& o);

/// The samples of the next batch, chosen from a queue.
struct BatchChoice {
    /// Queue positions taken, ascending.
    std::vector<std::size_t> take;
    /// True when a limit (count or budget) stopped the batch, i.e. the queue could fill it.
    bool full = false;
    bool oversize = false;
    /// Budget still unused (cost units: tokens with a token budget, else bytes); 0 w/o budget.
    std::uint64_t budget_left = 0;
};

/// Chooses from `queue` (in arrival order): within the bucket of the oldest sample whose batch
/// is full (else of the oldest sample), the samples in order while they fit.
BatchChoice choose_batch(const std::vector<SampleCost>& queue, const StreamConfig& o);

/// How many batches `choose_batch` would take one after the other from `queue` that are all
/// full (a limit stopped them), at most `max`: the steps a rank can yield from its queue alone.
std::uint64_t full_batches(std::vector<SampleCost> queue, const StreamConfig& o, std::uint64_t max);

/// One rank's view of a step, as allgathered.
struct RankStep {
    bool failed = false;
    std::uint64_t queued = 0;
    bool exhausted = false;
    std::uint64_t take = 0;
    bool full = false;
    std::uint64_t budget_left = 0;
    /// Sum of the queued samples' costs (tokens or bytes).
    std::uint64_t cost_sum = 0;
    /// Items this rank has read from its streams so far (progress of extra rounds).
    std::uint64_t read = 0;
    /// Full batches this rank holds in its queue (`full_batches`, at most
    /// `StreamConfig::window_steps`; 0 where steps are agreed one by one).
    std::uint64_t ready = 0;
    /// This rank asks for a stop (`EpochRange::request_stop`; the first round only).
    bool stop = false;

    std::vector<std::uint64_t> pack() const;
    static std::vector<RankStep> unpack(const std::vector<std::uint64_t>& all, int world_size);
};
constexpr std::size_t kRankStepWords = 10;

/// Items each rank still needs for a full batch (0 when full), estimated with the mean cost
/// of all queued samples under a budget.
std::vector<std::uint64_t> deficits(const std::vector<RankStep>& ranks, const StreamConfig& o);

/// Items `from` sends to `to` (matrix [from][to]): deficits are covered from surpluses
/// (queued − take), both walked in rank order.
std::vector<std::vector<std::uint64_t>> transfer_plan(const std::vector<std::uint64_t>& deficit,
                                                      const std::vector<std::uint64_t>& surplus);

}  // namespace mpistage::detail
