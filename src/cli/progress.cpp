// Progress of long `mpistage stage` runs: a line per epoch, and inside an epoch a live line on a
// terminal or a line every few seconds in a log.
#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "mpistage/error.hpp"

namespace mpistage::cli {

namespace {

std::string duration_text(double seconds) {
    char buf[32];
    if (seconds < 90) {
        std::snprintf(buf, sizeof buf, "%.0f s", seconds);
    } else if (seconds < 5400) {
        std::snprintf(buf, sizeof buf, "%.0f min", seconds / 60);
    } else {
        std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
    }
    return buf;
}

}  // namespace

ProgressMode parse_progress_mode(const std::string& word, bool stderr_is_terminal) {
    if (word == "auto") return stderr_is_terminal ? ProgressMode::bar : ProgressMode::lines;
    if (word == "bar") return ProgressMode::bar;
    if (word == "lines") return ProgressMode::lines;
    if (word == "none") return ProgressMode::none;
    throw ConfigError("--progress: '" + word + "' is not one of auto, bar, lines, none");
}

Progress::Progress(bool enabled, ProgressMode mode, std::chrono::duration<double> every,
                   std::uint64_t first_epoch, std::uint64_t epochs)
    : enabled_(enabled),
      mode_(enabled ? mode : ProgressMode::none),
      every_(every),
      first_epoch_(first_epoch),
      epochs_(epochs),
      start_(Clock::now()),
      epoch_start_(start_),
      last_shown_(start_) {}

Progress Progress::for_rank(int rank, bool quiet, const std::string& mode_word,
                            std::uint64_t every_seconds, std::uint64_t first_epoch,
                            std::uint64_t epochs) {
    const ProgressMode mode = parse_progress_mode(mode_word, ::isatty(STDERR_FILENO) == 1);
    return Progress(rank == 0 && !quiet, mode,
                    std::chrono::seconds(static_cast<std::int64_t>(every_seconds)), first_epoch,
                    epochs);
}

std::string Progress::epoch_label(std::uint64_t epoch) const {
    return "epoch " + std::to_string(epoch) + " (" + std::to_string(epoch - first_epoch_ + 1) +
           "/" + std::to_string(epochs_) + ")";
}

void Progress::step(std::uint64_t epoch, std::uint64_t step, std::uint64_t steps,
                    const EpochProgress& done) {
    if (mode_ == ProgressMode::none) return;
    const auto now = Clock::now();
    const bool last = steps > 0 && step >= steps;
    if (mode_ == ProgressMode::bar) {
        if (!last && now - last_shown_ < std::chrono::milliseconds(200)) return;
    } else if (last || now - last_shown_ < every_) {
        return;  // lines: the epoch's own line follows the last step
    }
    last_shown_ = now;
    const double elapsed = std::chrono::duration<double>(now - epoch_start_).count();
    std::string line = epoch_label(epoch) + ": step " + std::to_string(step) + "/" +
                       (steps == 0 ? std::string("?") : std::to_string(steps));
    char text[256];
    if (steps > 0) {
        std::snprintf(text, sizeof text, " (%.0f%%)",
                      100.0 * static_cast<double>(step) / static_cast<double>(steps));
        line += text;
    }
    const double per_s = elapsed > 0 ? 1.0 / elapsed : 0.0;
    std::snprintf(text, sizeof text, ", %.0f samples/s, %.1f MB/s",
                  static_cast<double>(done.samples) * per_s,
                  static_cast<double>(done.bytes) * per_s / 1e6);
    line += text;
    if (steps > 0 && step > 0 && step < steps) {
        line += ", ETA " + duration_text(elapsed / static_cast<double>(step) *
                                         static_cast<double>(steps - step));
    }
    std::snprintf(text, sizeof text, ", waits on rank 0: io %.2f s, peers %.2f s",
                  done.wait_io_seconds, done.wait_peers_seconds);
    line += text;
    if (mode_ == ProgressMode::bar) {
        std::fprintf(stderr, "\r\033[K%s", line.c_str());
        live_shown_ = true;
    } else {
        std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
}

void Progress::epoch_done(std::uint64_t epoch, std::uint64_t steps, std::uint64_t samples,
                          std::uint64_t bytes) {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - epoch_start_).count();
    epoch_start_ = now;
    last_shown_ = now;
    if (!enabled_) return;
    const std::uint64_t done = epoch - first_epoch_ + 1;
    std::string line = epoch_label(epoch) + ": " + std::to_string(steps) + " steps, " +
                       std::to_string(samples) + " samples, ";
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.2f s, %.1f MB/s on rank 0", seconds,
                  seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0.0);
    line += rate;
    if (done < epochs_) {
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        line += ", about " + duration_text(elapsed / done * (epochs_ - done)) + " left";
    }
    std::fprintf(stderr, "%s%s\n", live_shown_ ? "\r\033[K" : "", line.c_str());
    std::fflush(stderr);
    live_shown_ = false;
}

}  // namespace mpistage::cli
