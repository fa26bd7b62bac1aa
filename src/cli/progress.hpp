#pragma once
// Progress of long `mpistage stage` runs (internal to the CLI).

#include <chrono>
#include <cstdint>

namespace mpistage::cli {

/// Rank 0's progress on stderr, local (no collective): one line per finished epoch
/// ("epoch 3 (4/50): 235 steps, 60000 samples, 1.2 s, 45.3 MB/s on rank 0, about 55 s left"),
/// and on a terminal also a live line rewritten in place (at most 5 times a second) with the
/// step of the epoch in flight. Silent when disabled (`--quiet`, ranks other than 0).
class Progress {
public:
    /// `live`: rewrite a status line in place (stderr is a terminal).
    Progress(bool enabled, bool live, std::uint64_t first_epoch, std::uint64_t epochs);
    /// Local: rank 0 enabled unless `quiet`; live when stderr is a terminal.
    static Progress for_rank(int rank, bool quiet, std::uint64_t first_epoch, std::uint64_t epochs);

    /// After step `step` (1-based) of `steps` of `epoch` (0: not known, a stream).
    void step(std::uint64_t epoch, std::uint64_t step, std::uint64_t steps);
    /// After `epoch` ended: its steps, this rank's valid samples and bytes in it.
    void epoch_done(std::uint64_t epoch, std::uint64_t steps, std::uint64_t samples,
                    std::uint64_t bytes);

private:
    using Clock = std::chrono::steady_clock;
    bool enabled_;
    bool live_;
    std::uint64_t first_epoch_;
    std::uint64_t epochs_;
    Clock::time_point start_;
    Clock::time_point epoch_start_;
    Clock::time_point last_live_;
    bool live_shown_ = false;
};

}  // namespace mpistage::cli
