#pragma once
// Peak resident memory of the test process (Linux /proc), for memory-bound tests.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace mpistage::testing {

/// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), 0 when absent.
inline std::uint64_t status_bytes(const std::string& key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key + ":", 0) != 0) continue;
        std::istringstream s(line.substr(key.size() + 1));
        std::uint64_t kib = 0;
        s >> kib;
        return kib * 1024;
    }
    return 0;
}

/// True when resident memory measures the code under test: false under the sanitizers
/// (MPISTAGE_TEST_SANITIZED), whose shadow memory and allocator quarantine (freed blocks held
/// back, 256 MB by default) make RSS grow by what the code frees.
inline bool rss_measures_the_code() {
#if MPISTAGE_TEST_SANITIZED
    return false;
#else
    return true;
#endif
}

/// Resets VmHWM to the current RSS (Linux: "5" > /proc/self/clear_refs). False if unsupported.
inline bool reset_peak() {
    std::ofstream out("/proc/self/clear_refs");
    out << "5";
    out.flush();
    return static_cast<bool>(out);
}

}  // namespace mpistage::testing
