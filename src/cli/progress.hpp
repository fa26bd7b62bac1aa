#pragma once
// Progress of long `mpistage stage` runs (internal to the CLI).

#include <chrono>
#include <cstdint>
#include <string>

namespace mpistage::cli {

/// How rank 0 shows progress inside an epoch (--progress).
enum class ProgressMode {
    /// A status line rewritten in place (at most 5 times a second): for a terminal.
    bar,
    /// A full line every --progress-every seconds: for logs, e.g. under mpirun or srun, where
    /// rank 0's stderr is a pipe or a file and a rewritten line would never show.
    lines,
    /// Nothing inside an epoch (the line per finished epoch stays).
    none,
};

/// Local: the mode for --progress `word` (auto, bar, lines, none); auto is bar when
/// `stderr_is_terminal`, else lines. @throws ConfigError naming --progress for another word.
ProgressMode parse_progress_mode(const std::string& word, bool stderr_is_terminal);

/// What this rank did so far in the epoch in flight (local counts, no collective).
struct EpochProgress {
    /// Valid samples consumed and bytes read in this epoch.
    std::uint64_t samples = 0;
    std::uint64_t bytes = 0;
    /// Seconds `next()` waited in this epoch for this rank's reads and for other ranks.
    double wait_io_seconds = 0;
    double wait_peers_seconds = 0;
};

/// Rank 0's progress on stderr, local (no collective): one line per finished epoch
/// ("epoch 3 (4/50): 235 steps, 60000 samples, 1.2 s, 45.3 MB/s on rank 0, about 55 s left"),
/// and inside an epoch, by mode, a live line rewritten in place or a line every few seconds,
/// both "epoch 3 (4/50): step 120/235 (51%), 2400 samples/s, 45.3 MB/s, ETA 1.2 s, waits on
/// rank 0: io 0.30 s, peers 1.20 s" (a stream's step count is known only at its end: "?").
/// Silent when disabled (`--quiet`, ranks other than 0). Not thread-safe (the stage loop).
class Progress {
public:
    /// `every`: the least time between two lines of ProgressMode::lines (0: every step).
    Progress(bool enabled, ProgressMode mode, std::chrono::duration<double> every,
             std::uint64_t first_epoch, std::uint64_t epochs);
    /// Local: enabled on rank 0 unless `quiet`; `mode_word` is --progress (auto: bar on a
    /// terminal, else lines), `every_seconds` --progress-every.
    /// @throws ConfigError for an unknown mode word.
    static Progress for_rank(int rank, bool quiet, const std::string& mode_word,
                             std::uint64_t every_seconds, std::uint64_t first_epoch,
                             std::uint64_t epochs);

    /// After step `step` (1-based) of `steps` of `epoch` (0: not known, a stream); `done`: this
    /// rank's counts in the epoch so far.
    void step(std::uint64_t epoch, std::uint64_t step, std::uint64_t steps,
              const EpochProgress& done);
    /// After `epoch` ended: its steps, this rank's valid samples and bytes in it.
    void epoch_done(std::uint64_t epoch, std::uint64_t steps, std::uint64_t samples,
                    std::uint64_t bytes);

private:
    using Clock = std::chrono::steady_clock;
    std::string epoch_label(std::uint64_t epoch) const;

    bool enabled_;
    ProgressMode mode_;
    std::chrono::duration<double> every_;
    std::uint64_t first_epoch_;
    std::uint64_t epochs_;
    Clock::time_point start_;
    Clock::time_point epoch_start_;
    Clock::time_point last_shown_;
    bool live_shown_ = false;
};

}  // namespace mpistage::cli
