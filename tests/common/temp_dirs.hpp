#pragma once
/// @file
/// Test directories that live as long as the test process: removed when it exits.

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace mpistage_test {

/// Removes `dir` and everything in it when the process exits normally (returning from main or
/// std::exit, so after MPI_Finalize: a directory the ranks share outlives every collective that
/// reads it). Not collective: call it on the rank that created the directory. Thread-safe. A
/// process killed by a signal (a test's watchdog, ctest's timeout) leaves the directory behind.
inline void remove_at_exit(const std::string& dir) {
    struct Registry {
        std::mutex mutex;
        std::vector<std::string> dirs;
    };
    // Never destroyed: the exit handler below reads it after static destructors may have run.
    static Registry* const registry = [] {
        auto* r = new Registry;
        std::atexit([] {
            std::lock_guard<std::mutex> lock(registry->mutex);
            for (const std::string& d : registry->dirs) {
                std::error_code ec;
                std::filesystem::remove_all(d, ec);
            }
        });
        return r;
    }();
    std::lock_guard<std::mutex> lock(registry->mutex);
    registry->dirs.push_back(dir);
}

}  // namespace mpistage_test
