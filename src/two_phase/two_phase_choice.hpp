#pragma once
// The cost model of `TwoPhase::automatic` (LoaderOptions::pipeline.two_phase; docs/architecture.md,
// "Two-phase reads", "Choosing two-phase reads"): measured inputs, agreed over the ranks, and
// the pure prediction that decides between the plain path and two-phase reads.

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "pipeline/ring.hpp"

namespace mpistage::detail {

/// Two-phase reads are chosen only when their predicted step time is at most this fraction of
/// the plain path's (issue 21: "two-phase ≥ 0.8 × plain global, or not chosen by auto").
inline constexpr double kTwoPhaseMargin = 0.8;

/// The inputs of the decision: what this job measured (agreed, so identical on every rank).
/// Times in seconds, sizes in bytes, counts per step.
struct TwoPhaseCosts {
    double latency_s = 0;          ///< per read request of the source (slowest rank)
    double bytes_per_second = 0;   ///< bandwidth of one reader of the source (slowest rank)
    double sample_bytes = 0;       ///< mean bytes of a sample (largest rank's mean)
    std::uint64_t batch_size = 0;  ///< B, samples per rank per step
    std::uint64_t io_threads = 1;  ///< plain-path reads in flight (min(threads, slots), ≥ 1)
    double plain_runs = 0;         ///< coalesced runs of a rank's own batch (slowest rank)
    double slab_runs = 0;          ///< coalesced runs of a step in a rank's slab (slowest rank)
    double slab_samples = 0;       ///< samples of a step in a rank's slab (slowest rank)
    double exchange_s = 0;         ///< one alltoallv of one step's bytes (min of 3, slowest)
    double step_ids_s = 0;         ///< computing one step's global ids (slowest rank)
};

/// What the model predicts for one step (seconds) and what it chose.
struct TwoPhasePrediction {
    double plain_step_s = 0;
    double two_phase_step_s = 0;
    bool chosen = false;
};

/// Pure: the predicted step times of one rank and the choice.
///   plain     = (plain_runs × latency + B × sample_bytes / bandwidth) / io_threads
///   two-phase = slab_runs × latency + slab_samples × sample_bytes / bandwidth
///               + exchange + step_ids
/// (with a random global shuffle plain_runs ≈ B and slab_samples ≈ B). Two-phase reads are
/// chosen only when two-phase ≤ kTwoPhaseMargin × plain (0.8), so they are never chosen where
/// they are predicted to cost more than 80 % of the plain path; a tie or a model of no cost
/// (plain = 0) chooses the plain path.
TwoPhasePrediction predict_two_phase(const TwoPhaseCosts& c);

/// What a trial of real steps read both ways measured (seconds per step, slowest rank).
struct TwoPhaseTrial {
    std::uint64_t steps = 0;      ///< steps timed each way
    double plain_step_s = 0;      ///< `fill_slot` of this rank's batch, divided by io_threads
    double two_phase_step_s = 0;  ///< `TwoPhaseReader::read_step` and its agreement
};

/// Pure: the trial confirms two-phase reads: two-phase ≤ kTwoPhaseMargin × plain (and > 0).
bool trial_confirms(const TwoPhaseTrial& t);

/// Pure: the line of LoaderStats::two_phase_note: the decision ("two-phase auto: on: " or
/// "off: "; on only when `p.chosen` and, with a `trial`, `trial_confirms`), the measured costs
/// and both predictions, and the trial's times when given.
std::string describe_two_phase(const TwoPhaseCosts& c, const TwoPhasePrediction& p,
                               const TwoPhaseTrial* trial = nullptr);

/// Pure: the coalesced runs (maximal sequences of consecutive ids) among `ids`, in any order
/// (a repeated id counts once): the read requests a source makes for them.
std::uint64_t coalesced_runs(std::vector<std::uint64_t> ids);

/// Collective (one allgather for the slabs, three alltoallv, one allreduce; errors agreed):
/// measures the costs of `source` for fixed global batches of `plan` as this job sees them,
/// the same result on every rank:
/// - latency and bandwidth: 16 single-sample reads at random ids (after one warm-up read)
///   and three contiguous reads of about 4 MiB, through `Source::read`: with t1 the median
///   time of one sample of s bytes and tM the fastest of M bytes in one request,
///   bandwidth = (M − s) / (tM − t1) and latency = t1 − s / bandwidth (≥ 0);
/// - runs and slab samples: from the first (up to 4) steps of epoch 0 of the real plan
///   (`global_step_ids` and `two_phase_slabs`), per step the slowest rank, then the mean;
/// - exchange: one `Communicator::alltoallv` of B × s bytes per rank (split among the ranks),
///   the minimum of 3;
/// - step ids: the mean time of one `global_step_ids` call above.
/// `io_threads` is this rank's count of plain-path reads in flight (min(io_threads, ring
/// slots); 1 when reading on the consumer thread; the minimum over ranks is used, at least 1);
/// `steps` the epoch's steps (> 0). @throws the agreed error of a failed read.
TwoPhaseCosts measure_two_phase_costs(const Communicator& comm, const Source& source,
                                      const PlanOptions& plan, std::uint64_t num_samples,
                                      std::uint64_t steps, std::uint64_t io_threads);

/// Collective (slabs, one agreement and one exchange per two-phase step, one allreduce; errors
/// agreed): the confirmation of a model that chose two-phase reads, which misses costs it does
/// not model (packing and unpacking the messages, peers' skew at each exchange, the per-step
/// agreement): the first (up to 2) steps of `plan` (this rank's plan of epoch 0 from its
/// start, `options` with global sharding) read into `slot`, first as the plain path does
/// (`fill_slot`, the time divided by `io_threads` as in the model), then as two-phase reads
/// (`TwoPhaseReader::read_step` and the agreement on its status); per step the slowest
/// rank's mean. `slot` is scratch (a free ring slot of the plan's batch size).
TwoPhaseTrial trial_two_phase(const Communicator& comm, const Source& source,
                              const PlanOptions& options, std::uint64_t num_samples,
                              const EpochPlan& plan, Slot& slot, std::uint64_t io_threads);

}  // namespace mpistage::detail
