// The consumed-id digest's parts (src/plan/consumed_digest.hpp) against the planner, every rank
// simulated: what the ranks of a run were planned in their first steps (the sum a loader makes
// while it runs) equals what a restore recomputes from the state's numbers — the epoch
// positions [0, samples_consumed) for fixed global batches (at another world size too), all
// ids minus what the plan from the resume point still yields for budget batches — and the
// digest changes with the epoch, the seed and the number of steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"
#include "plan/consumed_digest.hpp"

namespace {

using namespace mpistage;
using detail::global_positions_digest;
using detail::plan_steps_digest;

/// Σ over the W ranks of the digests of their first `steps` steps of the plan from `start`.
std::uint64_t run_digest(std::uint64_t n, int w, const PlanOptions& o, std::uint64_t epoch,
                         const EpochStart& start, std::uint64_t steps,
                         const SampleBytesFn& bytes = {}) {
    std::uint64_t sum = 0;
    for (int r = 0; r < w; ++r) {
        const EpochPlan p = plan_epoch_on_demand(n, w, r, o, epoch, start, bytes);
        sum += plan_steps_digest(p, 0, std::min(steps, p.steps), epoch);
    }
    return sum;
}

/// Positions [0, end) of the epoch order, computed in `parts` parts (as `parts` ranks would).
std::uint64_t positions_in_parts(std::uint64_t n, const PlanOptions& o, std::uint64_t epoch,
                                 std::uint64_t end, std::uint64_t parts) {
    std::uint64_t sum = 0;
    for (std::uint64_t q = 0; q < parts; ++q) {
        const auto [b, e] = detail::part_range(end, q, parts);
        sum += global_positions_digest(n, o, epoch, b, e);
    }
    return sum;
}

PlanOptions fixed(Sharding sharding, std::uint64_t batch, Remainder remainder) {
    PlanOptions o;
    o.batch_size = batch;
    o.sharding = sharding;
    o.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
    o.remainder = remainder;
    o.seed = 5;
    return o;
}

TEST(ConsumedDigest, PartsCoverTheRangeOnce) {
    for (const std::uint64_t total : {0ull, 1ull, 7ull, 1000ull}) {
        for (const std::uint64_t parts : {1ull, 2ull, 3ull, 64ull}) {
            std::uint64_t at = 0;
            for (std::uint64_t q = 0; q < parts; ++q) {
                const auto [b, e] = detail::part_range(total, q, parts);
                EXPECT_EQ(b, at);
                EXPECT_LE(e - b, total / parts + 1);
                at = e;
            }
            EXPECT_EQ(at, total);
        }
    }
}

TEST(ConsumedDigest, FixedGlobalRunEqualsThePositionsAtAnyWorldSize) {
    const std::uint64_t n = 157;
    for (const Remainder rem : {Remainder::drop, Remainder::pad, Remainder::mask}) {
        const PlanOptions o = fixed(Sharding::global, 3, rem);
        for (const int w : {1, 2, 3, 5}) {
            const std::uint64_t steps = plan_totals(n, w, o).steps;
            for (std::uint64_t s = 0; s < steps; ++s) {  // every state inside the epoch
                const std::uint64_t p = std::min<std::uint64_t>(n, s * 3 * w);
                const std::uint64_t want = global_positions_digest(n, o, 2, 0, p);
                EXPECT_EQ(run_digest(n, w, o, 2, {}, s), want) << "W=" << w << " S=" << s;
                EXPECT_EQ(positions_in_parts(n, o, 2, p, 4), want);
                // Resumed at another world size (and batch size): the rest of the way.
                const int w2 = w % 3 + 2;
                const EpochStart start{s, p};
                const std::uint64_t more = plan_totals(n, w2, o, start).steps / 2;
                const std::uint64_t p2 = std::min<std::uint64_t>(n, p + more * 3 * w2);
                EXPECT_EQ(want + run_digest(n, w2, o, 2, start, more),
                          global_positions_digest(n, o, 2, 0, p2))
                    << "W=" << w << " then W=" << w2;
            }
        }
    }
}

TEST(ConsumedDigest, ByteRangeAndBalancedStepsAreTheSetOfTheirIds) {
    const std::uint64_t n = 101;
    const PlanOptions o = fixed(Sharding::byte_range, 4, Remainder::pad);
    // byte_range: the same ids in any order give the same digest (the sum of their terms).
    for (const int w : {1, 3}) {
        const EpochPlan whole = plan_epoch(n, w, 0, o, 1);
        std::uint64_t direct = 0;
        for (std::uint64_t k = 0; k < 2 * o.batch_size; ++k) {
            if (whole.valid[k]) direct += detail::consumed_term(whole.ids[k], 1);
        }
        EXPECT_EQ(plan_steps_digest(whole, 0, 2, 1), direct);
    }
    // balance_steps moves samples between ranks inside a global batch: the same set.
    PlanOptions balanced = fixed(Sharding::global, 4, Remainder::mask);
    balanced.balance_steps = true;
    const SampleBytesFn bytes = [](std::uint64_t id) { return 1 + mix64(id) % 1000; };
    EXPECT_EQ(run_digest(n, 3, balanced, 1, {}, 5, bytes),
              global_positions_digest(n, balanced, 1, 0, 5 * 4 * 3));
}

TEST(ConsumedDigest, EpochSeedAndStepsChangeTheDigest) {
    const std::uint64_t n = 157;
    const PlanOptions o = fixed(Sharding::global, 3, Remainder::mask);
    PlanOptions other_seed = o;
    other_seed.seed = 6;
    PlanOptions no_shuffle = o;
    no_shuffle.shuffle = Shuffle::none;
    const std::uint64_t base = global_positions_digest(n, o, 4, 0, 24);
    EXPECT_NE(base, global_positions_digest(n, o, 3, 0, 24));
    EXPECT_NE(base, global_positions_digest(n, o, 5, 0, 24));
    EXPECT_NE(base, global_positions_digest(n, other_seed, 4, 0, 24));
    EXPECT_NE(base, global_positions_digest(n, o, 4, 0, 30));
    // Without a shuffle every epoch consumes the same ids; the terms are keyed by the epoch.
    EXPECT_NE(global_positions_digest(n, no_shuffle, 4, 0, 24),
              global_positions_digest(n, no_shuffle, 5, 0, 24));
    EXPECT_NE(detail::consumed_digest_seed(4), detail::consumed_digest_seed(5));
}

TEST(ConsumedDigest, BudgetRunEqualsAllIdsMinusWhatTheResumePointLeaves) {
    const std::uint64_t n = 300;
    const SampleBytesFn bytes = [](std::uint64_t id) {
        const double u = (static_cast<double>(mix64(id ^ 77) >> 11) + 1.0) / 9007199254740993.0;
        return static_cast<std::uint64_t>(std::min(40.0 / std::pow(u, 1.0 / 1.2), 5000.0));
    };
    for (const Sharding sharding : {Sharding::global, Sharding::byte_range}) {
        PlanOptions o = fixed(sharding, 1, Remainder::mask);
        o.budget.batch_bytes = 400;
        o.budget.bucket_window = sharding == Sharding::global ? 3 : 0;
        for (const int w : {1, 2, 3}) {
            const EpochPlan first = plan_epoch(n, w, 0, o, 7, {}, bytes);
            for (std::uint64_t s = 1; s < first.steps; s += 3) {
                const std::uint64_t consumed = run_digest(n, w, o, 7, {}, s, bytes);
                const EpochStart start{s, first.job_samples_before[s]};
                // Resume at another world size under global sharding, the same under byte_range.
                const int w2 = sharding == Sharding::global ? w % 3 + 1 : w;
                std::uint64_t left = 0;
                for (int r = 0; r < w2; ++r) {
                    const EpochPlan rest = plan_epoch(n, w2, r, o, 7, start, bytes);
                    left += plan_steps_digest(rest, 0, rest.steps, 7);
                }
                EXPECT_EQ(detail::id_range_digest(0, n, 7) - left, consumed)
                    << to_string(sharding) << " W=" << w << " S=" << s;
            }
        }
    }
}

TEST(ConsumedDigest, HexRoundTrip) {
    std::uint64_t v = 0;
    EXPECT_EQ(detail::digest_to_hex(0x0123456789abcdefull), "0123456789abcdef");
    EXPECT_TRUE(detail::digest_from_hex("0123456789abcdef", v));
    EXPECT_EQ(v, 0x0123456789abcdefull);
    for (const char* bad :
         {"", "0123456789abcde", "0123456789ABCDEF", "0123456789abcdeg", "0123456789abcdef0"}) {
        EXPECT_FALSE(detail::digest_from_hex(bad, v)) << bad;
    }
}

}  // namespace
