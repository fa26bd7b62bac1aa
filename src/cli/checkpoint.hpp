#pragma once
// `mpistage stage --save-state/--resume`: the state file, and with --verify the log of the ids
// its epoch consumed, so a continuation can check exactly-once across both runs (internal to
// the CLI; docs/resume.md).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/state.hpp"

namespace mpistage::cli {

/// What a --save-state file holds: {"mpistage_state": 1, "loader": {...}, "id_log": {...}} (a
/// stream loader's state has `"input": "stream"` and no id log).
struct SavedState {
    /// The loader's state (of files or of a stream).
    LoaderState loader;
    /// Whether it is a stream loader's state.
    bool stream() const noexcept { return loader.input == LoaderInput::stream; }
    /// The epoch the state stands in, and the steps of it consumed.
    std::uint64_t epoch() const noexcept { return loader.epoch; }
    std::uint64_t steps() const noexcept { return loader.steps_consumed; }
    /// --verify runs: the file of int64 ids (native byte order) consumed in `loader.epoch`
    /// before this state, and how many of its first ids belong to the state (a run killed
    /// between two saves may have appended more). Empty path: the run kept no log.
    std::string ids_path;
    std::uint64_t ids_count = 0;
};

/// Local: reads a --save-state file (of files or of a stream). @throws ConfigError (malformed,
/// another version) or IoError (missing, unreadable), naming the path; FormatError for a
/// malformed stream state.
SavedState read_saved_state(const std::string& path);

/// Local: the first `ids_count` ids of the state's log (empty without a log).
/// @throws IoError when the log is missing or shorter than `ids_count`, naming it.
std::vector<std::int64_t> read_id_log(const SavedState& state);

/// Writes --save-state files during a run. Rank 0 writes; every rank takes part in `save`.
class Checkpointer {
public:
    /// `path`: the --save-state file (empty: saving is off); `log_ids`: whether to keep the id
    /// log (--verify); `prior` (rank 0): ids the resumed epoch consumed before this run.
    Checkpointer(std::string path, bool log_ids, std::uint64_t prior_epoch,
                 std::vector<std::int64_t> prior);

    bool enabled() const noexcept { return !path_.empty(); }
    /// State files written so far.
    std::uint64_t saves() const noexcept { return saves_; }

    /// Collective when enabled (a gather of the new ids with the id log, and one agreement):
    /// writes `state` atomically on rank 0, after appending to the id log the ids of
    /// `epoch_ids` (this rank's valid ids of epoch `epoch` in this run) not yet logged.
    /// A state at the same (epoch, steps) as the last one written is not written again (a stop
    /// at the step of a periodic save), and does not count in `saves()`.
    /// @throws IoError (identical on every rank) when rank 0 cannot write.
    void save(const Communicator& comm, const SavedState& state, std::uint64_t epoch,
              const std::vector<std::int64_t>& epoch_ids);

private:
    void write_log(const std::vector<std::int64_t>& gathered, std::uint64_t epoch, bool reset);

    std::string path_;
    bool log_ids_;
    std::uint64_t log_epoch_;
    /// Rank 0: the id log of `log_epoch_` this run writes (`path_` + ".ids.XXXXXX").
    std::string log_path_;
    /// Rank 0: ids in the log file of `log_epoch_`.
    std::uint64_t logged_ = 0;
    /// Rank 0: ids of the resumed epoch still to be written as the log's head.
    std::vector<std::int64_t> pending_prior_;
    /// This rank: how many of its ids of `log_epoch_` were gathered already.
    std::uint64_t sent_ = 0;
    bool log_started_ = false;
    std::uint64_t saves_ = 0;
    /// (epoch, steps) of the last state written.
    std::optional<std::pair<std::uint64_t, std::uint64_t>> last_written_;
};

}  // namespace mpistage::cli
