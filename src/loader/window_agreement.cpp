// Window requests: their words, and folding a completed one into the agreed outcome.
#include "loader/window_agreement.hpp"

#include <algorithm>

namespace mpistage::detail {

std::vector<std::uint64_t> window_words(std::uint64_t tag_hash, const WindowReport& report,
                                        int rank, int size) {
    const auto w = static_cast<std::uint64_t>(size);
    // (ready_until, who) packed as ready_until * (W + 1) + who, who = the rank when its read
    // of ready_until failed, else W: the minimum is the earliest step some rank lacks and, at
    // that step, the lowest rank that failed reading it (W: none, that rank is only slower).
    const std::uint64_t cap = (kNoStep - w) / (w + 1);
    const std::uint64_t ready = std::min(report.ready_until, cap);
    const std::uint64_t who = report.failed ? static_cast<std::uint64_t>(rank) : w;
    return {tag_hash, ~tag_hash, ready * (w + 1) + who, report.stop ? 0u : 1u};
}

void WindowState::reset(std::uint64_t lag_steps, std::uint64_t group_steps) {
    credit = 0;
    stop_at = kNoStep;
    error_step = kNoStep;
    error_rank = 0;
    last_start = kNoStep;
    mismatch = false;
    lag = lag_steps;
    group = std::max<std::uint64_t>(1, group_steps);
}

bool WindowState::absorb_front(int size) {
    // A copy: pop_front below destroys the request that owns the result.
    const std::vector<std::uint64_t> r = pending.front().request.result();
    const std::uint64_t step = pending.front().step;
    if (r[0] != ~r[1]) {  // some rank was in another call: the request is not a window's
        mismatch = true;
        return false;
    }
    pending.pop_front();
    const auto w = static_cast<std::uint64_t>(size);
    const std::uint64_t ready = r[2] / (w + 1);
    const std::uint64_t who = r[2] % (w + 1);
    credit = std::max(credit, ready);
    if (who < w && ready < error_step) {
        error_step = ready;
        error_rank = who;
    }
    if (r[3] == 0) stop_at = std::min(stop_at, step + lag);
    return true;
}

void window_shape(std::uint64_t min_prefetch, std::uint64_t steps, bool collective_steps,
                  std::uint64_t& lag, std::uint64_t& group) {
    if (collective_steps) {
        lag = 0;
        group = 1;
        return;
    }
    const std::uint64_t depth = std::max<std::uint64_t>(1, std::min(min_prefetch, steps));
    lag = depth / 2;
    group = depth - lag;
}

}  // namespace mpistage::detail
