// The window agreement's shape (src/loader/window_agreement.hpp): the words a request carries
// and the lag of each request, which every rank computes alike from the step and from the
// requests due before it. With promised reads (the memory tier) the lag covers
// kPromiseLagNs of steps at the agreed step time; reading from files it is half the ring.
#include <gtest/gtest.h>

#include <cstdint>

#include "loader/window_agreement.hpp"

using namespace mpistage::detail;

namespace {

/// The lag and group of a request started at step `s` (records it as started there).
std::pair<std::uint64_t, std::uint64_t> start_at(WindowState& w, std::uint64_t s,
                                                 std::uint64_t limit) {
    std::uint64_t lag = 0;
    std::uint64_t group = 0;
    w.shape_at(s, limit, lag, group);
    w.last_start = s;
    return {lag, group};
}

}  // namespace

TEST(WindowShape, PrefetchDepthGivesHalfInFlightHalfBetweenStarts) {
    std::uint64_t lag = 0;
    std::uint64_t group = 0;
    window_shape(4, 100, false, lag, group);
    EXPECT_EQ(lag, 2u);
    EXPECT_EQ(group, 2u);
    window_shape(7, 100, false, lag, group);
    EXPECT_EQ(lag, 3u);
    EXPECT_EQ(group, 4u);
    window_shape(64, 10, false, lag, group);  // never more than the epoch's steps
    EXPECT_EQ(lag, 5u);
    EXPECT_EQ(group, 5u);
    window_shape(16, 100, true, lag, group);  // steps read collectively: one per step
    EXPECT_EQ(lag, 0u);
    EXPECT_EQ(group, 1u);
}

TEST(WindowShape, WordsCarryStopAndLargestStepTimeUnderMinimum) {
    WindowReport slow;
    slow.ready_until = 40;
    slow.step_ns = 9000;
    WindowReport fast = slow;
    fast.step_ns = 1000;
    WindowReport unknown = slow;
    unknown.step_ns = 0;
    const auto a = window_words(7, slow, 0, 3);
    const auto b = window_words(7, fast, 1, 3);
    const auto c = window_words(7, unknown, 2, 3);
    const std::uint64_t low = (std::uint64_t{1} << 63) - 1;
    const std::uint64_t m = std::min({a[3], b[3], c[3]});
    EXPECT_NE(m >> 63, 0u) << "no rank asked for a stop";
    EXPECT_EQ(~m & low, 9000u) << "the largest step time wins; 0 (unknown) never does";
    WindowReport stopping = fast;
    stopping.stop = true;
    const auto d = window_words(7, stopping, 1, 3);
    EXPECT_EQ(std::min(a[3], d[3]) >> 63, 0u) << "any stop reaches every rank";
    // The tagged agreements' shape: four words, the tag and its complement first.
    ASSERT_EQ(a.size(), 4u);
    EXPECT_EQ(a[0], 7u);
    EXPECT_EQ(a[1], ~std::uint64_t{7});
    // (ready_until, who): a failing rank sorts before a slower one at the same step.
    WindowReport failed = slow;
    failed.failed = true;
    EXPECT_LT(window_words(7, failed, 2, 3)[2], a[2]);
}

TEST(WindowShape, ReadsFromFilesKeepThePrefetchShape) {
    WindowState w;
    w.reset(2, 2, false, 500);
    EXPECT_EQ(w.credit, 0u) << "nothing is credited before a request completes";
    w.timings.emplace_back(0, 1000);  // ignored without promised reads
    const auto [lag, group] = start_at(w, 10, 500);
    EXPECT_EQ(lag, 2u);
    EXPECT_EQ(group, 2u);
}

TEST(WindowShape, PromisedReadsLagFollowsTheStepTimeDueBeforeTheStep) {
    WindowState w;
    w.reset(2, 2, true, 100000);
    EXPECT_EQ(w.credit, 100000u) << "promised reads credit the whole epoch";
    // Unknown step time: the prefetch depth's shape.
    EXPECT_EQ(start_at(w, 0, 100000), std::make_pair(std::uint64_t{2}, std::uint64_t{2}));
    // A completed request due at step 4 carrying 10 µs per step: not in force at step 4 (a
    // rank may not have completed it yet), in force from step 5 on every rank.
    w.timings.emplace_back(4, 10'000);
    EXPECT_EQ(start_at(w, 4, 100000).first, 2u);
    const auto [lag, group] = start_at(w, 5, 100000);
    EXPECT_EQ(lag, kPromiseLagNs / 10'000);
    EXPECT_EQ(group, lag / 4);
    // A slower agreed step time shortens the lag of later requests, but a request is never
    // due before the one started earlier (requests complete in start order).
    w.timings.emplace_back(6, 1'000'000);
    const std::uint64_t due_before = 5 + lag;
    const auto later = start_at(w, 7, 100000);
    EXPECT_EQ(7 + later.first, due_before);
    // Once the earlier request is due, the slow step time sets the lag: 50 ms / 1 ms.
    const auto after = start_at(w, due_before + 1, 100000);
    EXPECT_EQ(after.first, kPromiseLagNs / 1'000'000);
}

TEST(WindowShape, PromisedLagEndsAtTheEpochAndCarriesOverToTheNext) {
    WindowState w;
    w.reset(2, 2, true, 300);
    w.timings.emplace_back(3, 1'000);  // 1 µs per step: 50,000 steps, more than the epoch
    EXPECT_EQ(start_at(w, 10, 300).first, 290u);
    EXPECT_EQ(start_at(w, 299, 300).first, 1u);
    // The next epoch starts with the step time agreed last (every rank completed it).
    w.timings.emplace_back(300, 20'000);
    w.reset(2, 2, true, 10000);
    EXPECT_EQ(w.step_ns, 20'000u);
    EXPECT_EQ(start_at(w, 0, 10000).first, kPromiseLagNs / 20'000);
}
