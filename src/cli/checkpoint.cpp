// --save-state files and their id logs.
#include "cli/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "cli/atomic_file.hpp"
#include "cli/verify.hpp"
#include "comm/agree.hpp"
#include "mpistage/error.hpp"
#include "util/input_file.hpp"

namespace mpistage::cli {

namespace {

constexpr int kStateFileVersion = 1;

// Prefix of the id logs of the state file `state_path`: each log is a new file
// `state_path.ids.XXXXXX` named by the state that uses it, so no save ever truncates the log
// that the state file on disk names (a kill between the two writes leaves the old pair).
std::string ids_prefix_of(const std::string& state_path) {
    return state_path + ".ids.";
}

// A --resume file larger than this is no state file (a loader state is about 700 bytes, a
// stream state a few hundred per sub-stream): refused before it is read (docs/resume.md).
constexpr std::uint64_t kMaxStateFileBytes = 1u << 20;

std::string saved_state_json(const SavedState& s) {
    nlohmann::ordered_json j;
    j["mpistage_state"] = kStateFileVersion;
    j["loader"] = nlohmann::ordered_json::parse(s.loader.to_json());
    if (!s.ids_path.empty()) j["id_log"] = {{"path", s.ids_path}, {"count", s.ids_count}};
    return j.dump(2) + "\n";
}

[[noreturn]] void throw_log_io(const std::string& path, const char* what) {
    throw IoError("stage: cannot write the --verify id log '" + path + "': " + what + ": " +
                  std::strerror(errno));
}

}  // namespace

SavedState read_saved_state(const std::string& path) {
    const std::uint64_t size_bytes =
        detail::probe_input_file(path, "stage: --resume file").size_bytes;
    if (size_bytes > kMaxStateFileBytes) {
        throw ConfigError("stage: --resume file '" + path + "' holds " +
                          std::to_string(size_bytes) + " bytes, more than the " +
                          std::to_string(kMaxStateFileBytes) +
                          " a state file may hold: not a --save-state file (not read)");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError("stage: cannot read --resume file '" + path + "'");
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::parse_error& e) {
        throw ConfigError("stage: --resume file '" + path + "' is not JSON: " + e.what());
    }
    if (j.is_object() && j.contains("mpistage_state") && j.contains("stream") &&
        !j.contains("loader")) {
        throw ConfigError("stage: --resume file '" + path +
                          "' holds a stream state in the layout of an earlier mpistage "
                          "(\"stream\"; this build writes stream states as \"loader\" with "
                          "\"input\": \"stream\"); start the pass again");
    }
    if (!j.is_object() || !j.contains("mpistage_state") || !j.contains("loader")) {
        throw ConfigError("stage: --resume file '" + path +
                          "' is not an mpistage state file (no \"mpistage_state\" and "
                          "\"loader\")");
    }
    if (j["mpistage_state"] != kStateFileVersion) {
        throw ConfigError("stage: --resume file '" + path + "' has state file version " +
                          j["mpistage_state"].dump() + "; this build reads version " +
                          std::to_string(kStateFileVersion));
    }
    SavedState s;
    s.loader = LoaderState::from_json(j["loader"].dump(), "'" + path + "'");
    if (j.contains("id_log")) {
        const nlohmann::json& log = j["id_log"];
        const std::string at = "stage: --resume file '" + path + "': id_log";
        if (!log.is_object() || !log.contains("path") || !log["path"].is_string() ||
            log["path"].get<std::string>().empty() || !log.contains("count") ||
            !log["count"].is_number_unsigned()) {
            throw ConfigError(at + " is " + log.dump() +
                              "; expected {\"path\": a file name, \"count\": an integer in "
                              "[0, 2^64)}");
        }
        s.ids_path = log["path"].get<std::string>();
        // The log is named relative to the state file's folder.
        if (s.ids_path[0] != '/') s.ids_path = folder_of(path) + "/" + s.ids_path;
        s.ids_count = log["count"].get<std::uint64_t>();
        // The log holds the valid ids of the consumed part of the state's epoch, one per
        // consumed sample (mid-epoch states never include padding).
        if (s.ids_count != s.loader.samples_consumed) {
            throw ConfigError(at + ".count " + std::to_string(s.ids_count) +
                              " differs from the state's samples_consumed " +
                              std::to_string(s.loader.samples_consumed) +
                              " (the log holds one id per consumed sample)");
        }
    }
    return s;
}

std::vector<std::int64_t> read_id_log(const SavedState& state) {
    if (state.ids_count == 0) return {};
    const std::string& path = state.ids_path;
    const std::uint64_t n = state.loader.num_samples;
    // The size first: a count is never allocated before the file shows it holds that many.
    const std::uint64_t size_bytes =
        detail::probe_input_file(path, "stage: the --verify id log of the --resume state")
            .size_bytes;
    if (size_bytes / sizeof(std::int64_t) < state.ids_count) {
        throw IoError("stage: the --verify id log '" + path + "' of the --resume state holds " +
                      std::to_string(size_bytes / sizeof(std::int64_t)) + " ids (" +
                      std::to_string(size_bytes) + " bytes); the state names " +
                      std::to_string(state.ids_count));
    }
    std::vector<std::int64_t> ids(state.ids_count);
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(ids.data()),
            static_cast<std::streamsize>(ids.size() * sizeof(std::int64_t)));
    if (!in) {
        throw IoError("stage: cannot read the first " + std::to_string(state.ids_count) +
                      " ids of the --verify id log '" + path + "' of the --resume state");
    }
    // Duplicates by sorting (entry, position) pairs: memory follows the log, never the state's
    // num_samples (a forged 2^63 must not size anything; the dataset is not open yet).
    std::vector<std::pair<std::int64_t, std::size_t>> sorted(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) sorted[k] = {ids[k], k};
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t j = 0; j < sorted.size(); ++j) {
        const std::int64_t id = sorted[j].first;
        const std::size_t k = j + 1 < sorted.size() && sorted[j + 1].first == id
                                  ? sorted[j + 1].second
                                  : sorted[j].second;
        const bool in_range = id >= 0 && static_cast<std::uint64_t>(id) < n;
        const bool twice = k != sorted[j].second;
        if (in_range && !twice) continue;
        throw ConfigError("stage: the --verify id log '" + path + "' of the --resume state has " +
                          (in_range ? "sample id " + std::to_string(id) + " twice"
                                    : "sample id " + std::to_string(id) + " outside [0, " +
                                          std::to_string(n) + ")") +
                          " (entry " + std::to_string(k) + " at byte offset " +
                          std::to_string(k * sizeof(std::int64_t)) + ")");
    }
    return ids;
}

Checkpointer::Checkpointer(std::string path, bool log_ids, std::uint64_t prior_epoch,
                           std::vector<std::int64_t> prior)
    : path_(std::move(path)),
      log_ids_(log_ids),
      log_epoch_(prior_epoch),
      pending_prior_(std::move(prior)) {}

void Checkpointer::write_log(const std::vector<std::int64_t>& gathered, std::uint64_t epoch,
                             bool reset) {
    // A new log (first save of this run, or a new epoch) is a new file, which starts with the
    // ids the resumed epoch consumed before this run, so the state file stays self-contained;
    // later saves of the epoch append to it (the state names how many of its ids count).
    std::FILE* f = nullptr;
    if (reset) {
        std::string fresh = ids_prefix_of(path_) + "XXXXXX";
        const int fd = ::mkstemp(fresh.data());
        if (fd < 0) throw_log_io(fresh, "create");
        if (::fchmod(fd, 0644) != 0 || !(f = ::fdopen(fd, "wb"))) {
            ::close(fd);
            ::unlink(fresh.c_str());
            throw_log_io(fresh, "open");
        }
        log_path_ = fresh;
    } else {
        f = std::fopen(log_path_.c_str(), "ab");
    }
    const std::string& log = log_path_;
    if (!f) throw_log_io(log, "open");
    std::vector<std::int64_t> head;
    if (reset) {
        logged_ = 0;
        if (epoch == log_epoch_) head.swap(pending_prior_);
    }
    for (const std::vector<std::int64_t>* v : {&std::as_const(head), &gathered}) {
        if (!v->empty() &&
            std::fwrite(v->data(), sizeof(std::int64_t), v->size(), f) != v->size()) {
            std::fclose(f);
            throw_log_io(log, "write");
        }
        logged_ += v->size();
    }
    if (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0) {
        std::fclose(f);
        throw_log_io(log, "flush");
    }
    if (std::fclose(f) != 0) throw_log_io(log, "close");
}

void Checkpointer::save(const Communicator& comm, const SavedState& state, std::uint64_t epoch,
                        const std::vector<std::int64_t>& epoch_ids) {
    if (!enabled()) return;
    // The same position as the last write (a stop at a periodic save's step): nothing new to
    // write. Epoch and steps are equal on every rank, so every rank skips together.
    const std::pair<std::uint64_t, std::uint64_t> at{state.epoch(), state.steps()};
    if (last_written_ == at) return;
    const bool reset = !log_started_ || epoch != log_epoch_;
    if (epoch != log_epoch_) sent_ = 0;
    std::vector<std::int64_t> gathered;
    if (log_ids_) {
        const std::vector<std::int64_t> fresh(
            epoch_ids.begin() + static_cast<std::ptrdiff_t>(sent_), epoch_ids.end());
        gathered = gather_to_root(comm, fresh);
        sent_ = epoch_ids.size();
    }
    run_agreed(comm, [&] {
        if (comm.rank() != 0) return;
        SavedState s = state;
        if (log_ids_) {
            write_log(gathered, epoch, reset);
            // The log belongs to the state's epoch; a state at the start of the next epoch
            // has consumed nothing of it yet.
            s.ids_path = log_path_.substr(log_path_.find_last_of('/') + 1);
            s.ids_count = state.epoch() == epoch ? logged_ : 0;
        }
        write_output_file(path_, saved_state_json(s), "--save-state file");
        // The state on disk names the new log now: the logs earlier states named (this run's
        // previous epoch, the run before, a killed run's) are no longer anyone's.
        if (log_ids_ && reset) {
            remove_stale_temporaries(ids_prefix_of(path_), s.ids_path);
        }
    });
    log_started_ = true;
    log_epoch_ = epoch;
    last_written_ = at;
    ++saves_;
}

}  // namespace mpistage::cli
