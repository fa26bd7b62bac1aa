// The cost model of `TwoPhase::automatic` (src/two_phase/two_phase_choice.hpp) without MPI: hand-
// computed step times that choose two-phase reads and ones that decline them, the 0.8 margin,
// the I/O threads of the plain path, the coalesced runs, and the names of the modes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/loader.hpp"
#include "two_phase/two_phase_choice.hpp"

using namespace mpistage;
using detail::TwoPhaseCosts;

namespace {

/// Fashion-MNIST-like samples (785 B) under the PFS model (1 ms a request, 2 GB/s), B = 64 at
/// two ranks with a random global shuffle: 64 runs in a rank's batch and ~63 in its slab.
TwoPhaseCosts pfs_random_shuffle() {
    TwoPhaseCosts c;
    c.latency_s = 1e-3;
    c.bytes_per_second = 2e9;
    c.sample_bytes = 785;
    c.batch_size = 64;
    c.io_threads = 1;
    c.plain_runs = 64;
    c.slab_runs = 63;
    c.slab_samples = 64;
    c.exchange_s = 2e-4;
    c.step_ids_s = 1e-5;
    return c;
}

}  // namespace

TEST(TwoPhaseChoice, RandomShuffleDeclinesAsRunsDoNotShrink) {
    const auto p = detail::predict_two_phase(pfs_random_shuffle());
    // plain = 64 × 1 ms + 64 × 785 B / 2 GB/s = 64.02512 ms
    EXPECT_NEAR(p.plain_step_s, 0.06402512, 1e-9);
    // two-phase = 63 × 1 ms + 0.02512 ms + 0.2 ms exchange + 0.01 ms ids = 63.23512 ms
    EXPECT_NEAR(p.two_phase_step_s, 0.06323512, 1e-9);
    EXPECT_FALSE(p.chosen);  // 0.988 × plain > 0.8 × plain
}

TEST(TwoPhaseChoice, DenseSlabsChooseTwoPhase) {
    TwoPhaseCosts c = pfs_random_shuffle();
    c.slab_runs = 4;  // a step covers most of each slab: few long reads
    c.exchange_s = 5e-4;
    c.step_ids_s = 5e-5;
    const auto p = detail::predict_two_phase(c);
    EXPECT_NEAR(p.plain_step_s, 0.06402512, 1e-9);
    // 4 ms + 0.02512 ms + 0.5 ms + 0.05 ms = 4.57512 ms
    EXPECT_NEAR(p.two_phase_step_s, 0.00457512, 1e-9);
    EXPECT_TRUE(p.chosen);
}

TEST(TwoPhaseChoice, IoThreadsOfThePlainPathCountAgainstTwoPhase) {
    TwoPhaseCosts c = pfs_random_shuffle();
    c.slab_runs = 4;
    c.exchange_s = 5e-4;
    c.step_ids_s = 5e-5;
    c.io_threads = 8;  // plain = 64.02512 / 8 = 8.00314 ms; 4.57512 ≤ 0.8 × 8.00314
    auto p = detail::predict_two_phase(c);
    EXPECT_NEAR(p.plain_step_s, 0.00800314, 1e-9);
    EXPECT_TRUE(p.chosen);
    c.io_threads = 16;  // plain = 4.00157 ms < 4.57512 ms
    p = detail::predict_two_phase(c);
    EXPECT_NEAR(p.plain_step_s, 0.00400157, 1e-9);
    EXPECT_FALSE(p.chosen);
    c.io_threads = 0;  // counted as one reader (reads on the consumer thread)
    EXPECT_NEAR(detail::predict_two_phase(c).plain_step_s, 0.06402512, 1e-9);
}

TEST(TwoPhaseChoice, MarginIsEightyPercent) {
    TwoPhaseCosts c;  // latency only (exact binary fractions): plain = 10 × 0.125 s = 1.25 s
    c.latency_s = 0.125;
    c.batch_size = 10;
    c.plain_runs = 10;
    c.slab_runs = 7.9;  // 0.9875 s ≤ 1.0 s
    EXPECT_TRUE(detail::predict_two_phase(c).chosen);
    c.slab_runs = 8.1;  // 1.0125 s > 1.0 s
    EXPECT_FALSE(detail::predict_two_phase(c).chosen);
    c.slab_runs = 0;
    c.exchange_s = 1.01;  // an exchange slower than 0.8 × plain alone declines
    EXPECT_FALSE(detail::predict_two_phase(c).chosen);
}

TEST(TwoPhaseChoice, NoMeasuredCostChoosesThePlainPath) {
    EXPECT_FALSE(detail::predict_two_phase(TwoPhaseCosts{}).chosen);
}

TEST(TwoPhaseChoice, BandwidthBoundStepsDecline) {
    TwoPhaseCosts c;  // 150 KB samples, no latency: both read the same bytes, plus an exchange
    c.bytes_per_second = 1e9;
    c.sample_bytes = 150e3;
    c.batch_size = 16;
    c.io_threads = 1;
    c.plain_runs = 16;
    c.slab_runs = 1;
    c.slab_samples = 16;
    c.exchange_s = 1e-3;
    const auto p = detail::predict_two_phase(c);
    EXPECT_NEAR(p.plain_step_s, 2.4e-3, 1e-12);
    EXPECT_NEAR(p.two_phase_step_s, 3.4e-3, 1e-12);
    EXPECT_FALSE(p.chosen);
}

TEST(TwoPhaseChoice, NoteNamesTheChoiceAndBothPredictions) {
    const TwoPhaseCosts c = pfs_random_shuffle();
    const std::string note = detail::describe_two_phase(c, detail::predict_two_phase(c));
    EXPECT_EQ(note.rfind("two-phase auto: off:", 0), 0u) << note;
    EXPECT_NE(note.find("63.235 ms two-phase vs 64.025 ms plain"), std::string::npos) << note;
    EXPECT_NE(note.find("1000.0 us/request"), std::string::npos) << note;
}

TEST(TwoPhaseChoice, CoalescedRunsCountConsecutiveIdsInAnyOrder) {
    EXPECT_EQ(detail::coalesced_runs({}), 0u);
    EXPECT_EQ(detail::coalesced_runs({7}), 1u);
    EXPECT_EQ(detail::coalesced_runs({5, 3, 4, 10, 12, 11, 20}), 3u);
    EXPECT_EQ(detail::coalesced_runs({1, 1, 2}), 1u);
    EXPECT_EQ(detail::coalesced_runs({0, 2, 4, 6}), 4u);
}

TEST(TwoPhaseChoice, ModeNamesRoundTripAndOthersAreRefusedByName) {
    for (TwoPhase t : {TwoPhase::off, TwoPhase::on, TwoPhase::automatic}) {
        EXPECT_EQ(parse_two_phase(to_string(t)), t);
    }
    EXPECT_EQ(to_string(TwoPhase::automatic), "auto");
    try {
        (void)parse_two_phase("maybe");
        FAIL() << "'maybe' accepted";
    } catch (const ConfigError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("'maybe'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("off, on or auto"), std::string::npos) << msg;
    }
}

TEST(TwoPhaseChoice, TrialOfRealStepsConfirmsOrOverrulesTheModel) {
    const TwoPhaseCosts c = [] {
        TwoPhaseCosts x = pfs_random_shuffle();
        x.slab_runs = 4;
        return x;
    }();
    const auto p = detail::predict_two_phase(c);
    ASSERT_TRUE(p.chosen);
    detail::TwoPhaseTrial t;
    t.steps = 2;
    t.plain_step_s = 0.010;
    t.two_phase_step_s = 0.0079;  // ≤ 0.8 × 10 ms: confirmed
    EXPECT_TRUE(detail::trial_confirms(t));
    std::string note = detail::describe_two_phase(c, p, &t);
    EXPECT_EQ(note.rfind("two-phase auto: on:", 0), 0u) << note;
    EXPECT_NE(note.find("trial of 2 real steps: 7.900 ms two-phase vs 10.000 ms plain"),
              std::string::npos)
        << note;
    t.two_phase_step_s = 0.0081;  // the real steps cost more than the model saw: off
    EXPECT_FALSE(detail::trial_confirms(t));
    note = detail::describe_two_phase(c, p, &t);
    EXPECT_EQ(note.rfind("two-phase auto: off:", 0), 0u) << note;
    EXPECT_FALSE(detail::trial_confirms(detail::TwoPhaseTrial{}));
}
