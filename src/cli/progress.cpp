// Progress of long `mpistage stage` runs: a line per epoch, a live line on a terminal.
#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <string>

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

Progress::Progress(bool enabled, bool live, std::uint64_t first_epoch, std::uint64_t epochs)
    : enabled_(enabled),
      live_(enabled && live),
      first_epoch_(first_epoch),
      epochs_(epochs),
      start_(Clock::now()),
      epoch_start_(start_),
      last_live_(start_) {}

Progress Progress::for_rank(int rank, bool quiet, std::uint64_t first_epoch, std::uint64_t epochs) {
    return Progress(rank == 0 && !quiet, ::isatty(STDERR_FILENO) == 1, first_epoch, epochs);
}

void Progress::step(std::uint64_t epoch, std::uint64_t step, std::uint64_t steps) {
    if (!live_) return;
    const auto now = Clock::now();
    // steps == 0: a stream, whose steps are known only at its end.
    if ((steps == 0 || step < steps) && now - last_live_ < std::chrono::milliseconds(200)) return;
    last_live_ = now;
    std::fprintf(stderr, "\r\033[Kepoch %llu (%llu/%llu): step %llu/%s",
                 static_cast<unsigned long long>(epoch),
                 static_cast<unsigned long long>(epoch - first_epoch_ + 1),
                 static_cast<unsigned long long>(epochs_), static_cast<unsigned long long>(step),
                 steps == 0 ? "?" : std::to_string(steps).c_str());
    std::fflush(stderr);
    live_shown_ = true;
}

void Progress::epoch_done(std::uint64_t epoch, std::uint64_t steps, std::uint64_t samples,
                          std::uint64_t bytes) {
    const auto now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - epoch_start_).count();
    epoch_start_ = now;
    if (!enabled_) return;
    const std::uint64_t done = epoch - first_epoch_ + 1;
    std::string line = "epoch " + std::to_string(epoch) + " (" + std::to_string(done) + "/" +
                       std::to_string(epochs_) + "): " + std::to_string(steps) + " steps, " +
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
