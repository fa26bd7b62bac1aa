// Window requests: their words, and folding a completed one into the agreed outcome.
#include "loader/window_agreement.hpp"

#include <algorithm>

namespace mpistage::detail {

namespace {

constexpr std::uint64_t kTopBit = std::uint64_t{1} << 63;
constexpr std::uint64_t kLowBits = kTopBit - 1;

}  // namespace

std::vector<std::uint64_t> window_words(std::uint64_t tag_hash, const WindowReport& report,
                                        int rank, int size) {
    const auto w = static_cast<std::uint64_t>(size);
    // (ready_until, who) packed as ready_until * (W + 1) + who, who = the rank when its read
    // of ready_until failed, else W: the minimum is the earliest step some rank lacks and, at
    // that step, the lowest rank that failed reading it (W: none, that rank is only slower).
    const std::uint64_t cap = (kNoStep - w) / (w + 1);
    const std::uint64_t ready = std::min(report.ready_until, cap);
    const std::uint64_t who = report.failed ? static_cast<std::uint64_t>(rank) : w;
    // The top bit is the inverted stop flag (as every tagged agreement's last word, whose
    // flag is 0 or 1), the bits below the step time's complement: the minimum carries any
    // stop and, among the ranks that decide the top bit, the largest step time.
    const std::uint64_t ns = std::min(report.step_ns, kLowBits);
    return {tag_hash, ~tag_hash, ready * (w + 1) + who,
            (report.stop ? 0 : kTopBit) | (~ns & kLowBits)};
}

void WindowState::reset(std::uint64_t lag_steps, std::uint64_t group_steps, bool promised,
                        std::uint64_t limit) {
    // Promised reads: the whole epoch is ready from its start (a failure is agreed later).
    credit = promised ? limit : 0;
    stop_at = kNoStep;
    error_step = kNoStep;
    error_rank = 0;
    error_at = kNoStep;
    last_start = kNoStep;
    next_start = 0;
    last_due = 0;
    mismatch = false;
    promise = promised;
    base_lag = lag_steps;
    base_group = std::max<std::uint64_t>(1, group_steps);
    // The step time agreed last carries over: every rank completed the same requests before
    // an epoch starts (the loader's collectives finish them first).
    for (const auto& t : timings) {
        if (t.second > 0) step_ns = t.second;
    }
    timings.clear();
    if (!promise) step_ns = 0;
}

void WindowState::shape_at(std::uint64_t s, std::uint64_t limit, std::uint64_t& lag,
                           std::uint64_t& group) {
    lag = base_lag;
    group = base_group;
    if (!promise) {
        last_due = s + lag;
        return;
    }
    // Every rank completed the requests due before step s, in the same order: the step time
    // in force is the one of the last of them (requests due later may be complete here only).
    while (!timings.empty() && timings.front().first < s) {
        if (timings.front().second > 0) step_ns = timings.front().second;
        timings.pop_front();
    }
    if (step_ns > 0) lag = std::max(lag, (kPromiseLagNs + step_ns - 1) / step_ns);
    lag = std::min(lag, limit > s ? limit - s : 0);
    // Requests complete in start order: never due before the one started last.
    if (last_start != kNoStep && last_due > s) lag = std::max(lag, last_due - s);
    group = std::max(group, lag / 4);
    last_due = s + lag;
}

bool WindowState::absorb_front(int size) {
    // A copy: pop_front below destroys the request that owns the result.
    const std::vector<std::uint64_t> r = pending.front().request.result();
    const std::uint64_t step = pending.front().step;
    const std::uint64_t lag = pending.front().lag;
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
    if (who < w) error_at = std::min(error_at, promise ? step + lag : ready);
    if ((r[3] & kTopBit) == 0) stop_at = std::min(stop_at, step + lag);
    if (promise) timings.emplace_back(step + lag, ~r[3] & kLowBits);
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
