#include "tier/touch_pass.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "tier/mapped_rows.hpp"
#include "util/page_populate.hpp"

namespace mpistage::detail {

namespace {

std::atomic<bool> g_hold{false};
std::atomic<std::uint64_t> g_faults{0};

}  // namespace

void hold_touch_passes(bool hold) noexcept {
    g_hold.store(hold);
}

std::uint64_t touch_pass_faults() noexcept {
    return g_faults.load();
}

void TouchPass::start(std::vector<TouchSpan> spans) noexcept {
    if (thread_.joinable()) return;
    try {
        thread_ = std::thread([this, spans = std::move(spans)] {
            ::pthread_setname_np(::pthread_self(), "mpistage-touch");
            constexpr std::uint64_t kPiece = std::uint64_t{1} << 20;  // between looks at stop_
            for (const TouchSpan& s : spans) {
                for (std::uint64_t at = 0; at < s.bytes; at += kPiece) {
                    if (stop_.load(std::memory_order_relaxed)) return;
                    TouchSpan piece{s.begin + at, std::min(kPiece, s.bytes - at)};
                    const bool loaded = copy_guarded(
                        [](void* arg) {
                            const auto* p = static_cast<const TouchSpan*>(arg);
                            touch_pages(p->begin, static_cast<std::size_t>(p->bytes));
                        },
                        &piece);
                    if (!loaded) {  // a mapped file truncated: the reads report it
                        g_faults.fetch_add(1);
                        return;
                    }
                    while (g_hold.load() && !stop_.load(std::memory_order_relaxed)) {
                        std::this_thread::sleep_for(std::chrono::milliseconds(1));
                    }
                }
            }
        });
    } catch (const std::exception&) {
        // No thread (std::system_error, std::bad_alloc): the epochs pay the first loads.
    }
}

TouchPass::~TouchPass() {
    stop_.store(true, std::memory_order_relaxed);
    if (thread_.joinable()) thread_.join();
}

}  // namespace mpistage::detail
