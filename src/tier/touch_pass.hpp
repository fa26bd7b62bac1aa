#pragma once
// The memory tier's touch pass (internal; docs/architecture.md, "Touch pass"): one load per
// page of what a rank may read, in a thread that starts beside the first epoch.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace mpistage::detail {

/// Bytes `[begin, begin + bytes)` the touch pass loads from (read-only).
struct TouchSpan {
    const std::byte* begin = nullptr;
    std::uint64_t bytes = 0;
};

/// A thread (`mpistage-touch`) that loads one byte of every page of its spans, in 1 MiB
/// pieces, each through `copy_guarded`: a guard against SIGBUS where `install_sigbus_guard` was
/// called first, as the mapped staging does (shared-memory windows cannot fault). A fault (a
/// file truncated since it was mapped) ends the pass, and the tier's reads report the change.
/// Why: on some machines a process's first load of each page costs about a microsecond even
/// after MADV_POPULATE_READ mapped it (the benchmark machine, a virtual machine; benchmarks/
/// README.md, "Touch pass"). A global shuffle reaches about half of the pages it has not read
/// yet per epoch, so left to the epochs this cost keeps the first several below the steady
/// rate; paid at staging it multiplies the mapped staging. Normal priority: in the idle
/// scheduling class the pass fell behind busy epochs. Local, never collective. The spans must
/// stay readable until the destructor returns: it stops the pass within one piece and joins
/// it, so declare the pass after what it reads.
class TouchPass {
public:
    TouchPass() = default;
    TouchPass(const TouchPass&) = delete;
    TouchPass& operator=(const TouchPass&) = delete;
    ~TouchPass();

    /// Starts the pass over `spans` (once). Never throws: without a thread (std::system_error)
    /// the epochs pay the first loads themselves.
    void start(std::vector<TouchSpan> spans) noexcept;

private:
    std::thread thread_;
    std::atomic<bool> stop_{false};
};

/// Fault injection for tests (tests/mpi/tier/test_stage_read.cpp): while `hold` is true, every
/// touch pass of this process waits after the piece it is loading (until released or
/// stopped), so a
/// test can change a file while a pass is certainly running. Thread-safe (an atomic).
void hold_touch_passes(bool hold) noexcept;
/// Touch passes of this process ended by a fault (a mapped file truncated under them).
/// Thread-safe (an atomic).
std::uint64_t touch_pass_faults() noexcept;

}  // namespace mpistage::detail
