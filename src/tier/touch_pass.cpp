#include "tier/touch_pass.hpp"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "tier/mapped_rows.hpp"
#include "util/page_populate.hpp"

namespace mpistage::detail {

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
                    if (!loaded) return;  // a mapped file truncated: the reads report it
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
