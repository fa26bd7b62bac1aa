// The JSON report of `mpistage stage --json`, written atomically by rank 0: a reader never sees
// a partial or empty file, and a failed run leaves a report that says so.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli/report.hpp"

namespace mpistage::cli {

namespace {

std::string folder_of(const std::string& path) {
    const auto slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

[[noreturn]] void throw_json_io(const std::string& path, const std::string& what, int err) {
    throw IoError("stage: cannot write --json file '" + path + "': " + what + ": " +
                  std::strerror(err));
}

// Writes `text` to a temporary file next to `path`, then renames it over `path`.
void write_file_atomically(const std::string& path, const std::string& text) {
    std::string tmp = path + ".tmp.XXXXXX";
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0) throw_json_io(path, "creating a temporary file in its folder", errno);
    const auto fail = [&](const char* what) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        throw_json_io(path, what, err);
    };
    if (::fchmod(fd, 0644) != 0) fail("fchmod");
    for (std::size_t done = 0; done < text.size();) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write");
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) fail("fsync");
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw_json_io(path, "close", err);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw_json_io(path, "rename", err);
    }
}

nlohmann::json epoch_json(const EpochReport& r, bool verify) {
    nlohmann::json e;
    e["epoch"] = r.epoch;
    e["batches_per_rank"] = r.batches;
    e["tier"] = r.tier;
    e["seconds"] = r.seconds;
    if (verify) {
        e["valid_samples_per_rank"] = r.valid;
        e["duplicates"] = r.duplicates;
        e["missing"] = r.missing;
        e["out_of_range"] = r.out_of_range;
        e["exactly_once"] = r.ok;
    }
    return e;
}

nlohmann::json rank_json(std::size_t rank, const RankTotals& t) {
    return {{"rank", rank},
            {"samples", t.samples},
            {"batches", t.batches},
            {"bytes", t.bytes},
            {"seconds", t.seconds},
            {"wait_seconds", t.wait_seconds},
            {"wait_io_seconds", t.wait_io_seconds},
            {"wait_peers_seconds", t.wait_peers_seconds},
            {"records_moved", t.records_moved}};
}

}  // namespace

void check_json_destination(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        throw IoError("stage: cannot write --json file '" + path + "': it is a directory");
    }
    const std::string folder = folder_of(path);
    if (::access(folder.c_str(), W_OK | X_OK) != 0) {
        throw_json_io(path, "cannot write into its folder '" + folder + "'", errno);
    }
}

void write_stage_json(const StageArgs& a, const StageOutcome& o) {
    nlohmann::json j;
    j["status"] = o.all_ok ? "ok" : "verify_failed";
    j["world_size"] = o.world_size;
    j["num_samples"] = o.num_samples;
    j["batch_size"] = a.batch_size;
    j["remainder"] = a.remainder;
    j["shuffle"] = a.shuffle;
    j["sharding"] = a.sharding;
    for (const auto& stat : o.source) j[stat.name] = stat.value;
    j["stage"] = tier_json(o.tier);
    j["epochs"] = nlohmann::json::array();
    for (const auto& r : o.epochs) j["epochs"].push_back(epoch_json(r, a.verify));
    j["ranks"] = nlohmann::json::array();
    for (std::size_t r = 0; r < o.ranks.size(); ++r) j["ranks"].push_back(rank_json(r, o.ranks[r]));
    write_file_atomically(a.json,
                          j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void write_error_json(const std::string& path, int world_size, const Error& error) {
    nlohmann::json j;
    j["status"] = "error";
    j["world_size"] = world_size;
    j["error"] = {{"kind", error_kind_name(error.kind())}, {"message", error.what()}};
    write_file_atomically(path,
                          j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace mpistage::cli
