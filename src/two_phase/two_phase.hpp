#pragma once
// Two-phase reads (LoaderOptions::pipeline.two_phase; docs/architecture.md, "Two-phase reads"):
// with global sharding and no staging, each rank reads only the samples of a step that lie in its
// contiguous, byte-balanced slab of the dataset (sorted by id, so the source coalesces them
// into long sequential reads), and one personalised exchange per step delivers every sample to
// the rank whose batch holds it.

#include <cstdint>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "pipeline/prefetch.hpp"
#include "pipeline/ring.hpp"

namespace mpistage::detail {

/// Collective: the slabs of the two-phase reads, W + 1 entries; rank r reads the samples
/// `[begins[r], begins[r+1])`. The cut is the byte-range cut of the source
/// (`Source::records_in_cut`: the concatenated bytes cut at r·T/W, snapped to records), so
/// slabs hold equal bytes within one record, also for variable-size records; one allgather.
/// @throws FormatError (on every rank) when the cuts do not add up to `num_samples`.
std::vector<std::uint64_t> two_phase_slabs(const Communicator& comm, const Source& source,
                                           std::uint64_t num_samples);

/// What one rank did in the two-phase reads of one reader (one epoch).
struct TwoPhaseCounters {
    std::uint64_t steps = 0;             ///< exchanges made
    std::uint64_t samples_read = 0;      ///< samples this rank read from the source
    std::uint64_t samples_received = 0;  ///< samples delivered into this rank's batches
    std::uint64_t bytes_sent = 0;        ///< message bytes sent to all ranks (self included)
};

/// The two-phase reads of one epoch of one rank.
///
/// Collective per step: every rank calls `read_step` for every step of the plan, in order, on
/// one thread (the loader's consumer thread: the exchange is an MPI collective, and running it
/// there needs no MPI_THREAD_MULTIPLE and keeps the step order of all ranks equal by
/// construction; the price is that reads do not overlap the consumer's work).
///
/// Memory per step: the step's ids (8 bytes × W·B), the samples this rank reads (on average B,
/// at most W·B when a whole global batch lies in one slab, e.g. without a shuffle) held twice
/// (read buffer and messages), and the samples it receives (B) held twice (messages and slot).
///
/// Borrows `comm`, `source` and `plan`, which must outlive it. Not thread-safe.
class TwoPhaseReader {
public:
    /// Not collective. `slabs` from `two_phase_slabs`; `options`, `epoch` and `start` are those
    /// `plan` (this rank's plan) was made from, with global sharding.
    /// @throws ConfigError for byte_range sharding or slabs that do not fit the world.
    TwoPhaseReader(const Communicator& comm, const Source& source, std::vector<std::uint64_t> slabs,
                   const PlanOptions& options, std::uint64_t epoch, const EpochStart& start,
                   const EpochPlan& plan);

    /// Collective (one `Communicator::alltoallv`): reads this rank's part of step `step` (0 =
    /// the plan's first) and fills `slot` with the rank's batch of that step, as `fill_slot`
    /// would. `status` is the rank's outcome so far (e.g. no free slot, then `slot` is
    /// nullptr): a failed rank reads nothing and sends only a failure flag, and every rank
    /// still takes part in the exchange. Returns this rank's outcome: its own failure (read
    /// error, malformed message, failed exchange); a rank whose peer failed returns success
    /// with an unfilled slot, so the caller must agree (`agree_or_throw`) on the returned
    /// status before using the slot — every rank then throws the failing rank's error.
    LocalStatus read_step(Slot* slot, std::uint64_t step, LocalStatus status) noexcept;

    const TwoPhaseCounters& counters() const noexcept { return counters_; }
    const std::vector<std::uint64_t>& slabs() const noexcept { return slabs_; }

private:
    /// Reads the step's samples of this rank's slab and packs one message per rank into
    /// send_ / send_offsets_.
    void read_own_part(const std::vector<std::int64_t>& step_ids);
    /// Fills `slot` from recv_ / recv_offsets_.
    void deliver(Slot& slot, std::uint64_t step);
    int slab_of(std::uint64_t id) const;

    const Communicator& comm_;
    const Source& source_;
    std::vector<std::uint64_t> slabs_;
    PlanOptions options_;
    std::uint64_t epoch_ = 0;
    EpochStart start_;
    const EpochPlan& plan_;
    SampleBytesFn sample_bytes_;
    TwoPhaseCounters counters_;
    // The sample bytes' buffers, reused from step to step: their capacity stays (at the epoch's
    // largest step, until the reader goes with its epoch), so a step maps no fresh page for
    // them; only index vectors of O(W·B) entries are allocated per step. Fresh 2.4 MB buffers a
    // step made 150 KB samples page-fault bound.
    std::vector<std::vector<std::byte>> staged_;  // per field: this rank's samples as read
    std::string send_;
    std::string recv_;
    std::vector<std::uint64_t> send_offsets_;
    std::vector<std::uint64_t> recv_offsets_;
};

/// Collective (`two_phase_slabs`: one allgather): the Prefetcher's step reader for the
/// two-phase reads of epoch `epoch` from `start`, whose plan on this rank is `plan`. Borrows
/// `comm`, `source` and `plan`, which must outlive it. @throws as `two_phase_slabs`.
StepReader two_phase_step_reader(const Communicator& comm, const Source& source,
                                 std::uint64_t num_samples, const PlanOptions& options,
                                 std::uint64_t epoch, const EpochStart& start,
                                 const EpochPlan& plan);

}  // namespace mpistage::detail
