// The process-wide stop request (request_stop, install_stop_signals): a lock-free atomic that a
// signal handler may set; every window agreement of every loader carries it (epoch_range.cpp).
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>
#include <atomic>

#include "mpistage/error.hpp"
#include "mpistage/stop.hpp"

namespace mpistage {

namespace {

// Lock-free atomics are the objects a signal handler may touch ([support.signal]).
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the stop request must be async-signal-safe");

extern "C" void on_stop_signal(int signo) {
    g_stop_signal.store(signo, std::memory_order_relaxed);
    g_stop.store(true, std::memory_order_relaxed);
}

}  // namespace

void request_stop() noexcept {
    g_stop.store(true, std::memory_order_relaxed);
}

bool stop_requested() noexcept {
    return g_stop.load(std::memory_order_relaxed);
}

int stop_signal() noexcept {
    return g_stop_signal.load(std::memory_order_relaxed);
}

void clear_stop_request() noexcept {
    g_stop.store(false, std::memory_order_relaxed);
    g_stop_signal.store(0, std::memory_order_relaxed);
}

void install_stop_signals(const std::vector<int>& signals) {
    for (const int s : signals) {
        if (s <= 0 || s >= NSIG || s == SIGKILL || s == SIGSTOP) {
            throw ConfigError("stop signals: signal " + std::to_string(s) +
                              " cannot be caught (accepted: 1 to " + std::to_string(NSIG - 1) +
                              " except SIGKILL and SIGSTOP)");
        }
    }
    for (const int s : signals) {
        struct sigaction action;
        std::memset(&action, 0, sizeof action);
        action.sa_handler = on_stop_signal;
        sigemptyset(&action.sa_mask);
        action.sa_flags = SA_RESTART;
        if (sigaction(s, &action, nullptr) != 0) {
            throw ConfigError("stop signals: cannot install a handler for signal " +
                              std::to_string(s) + ": " + std::strerror(errno));
        }
    }
}

}  // namespace mpistage
