/// @file
/// Property tests of the pure planner (include/mpistage/plan.hpp), simulating worlds of up to 64
/// ranks: every rank's plan is computed here, serially, exactly as that rank would compute it.
/// The contract checked is DESIGN.md §1: exactly once, equal steps, no unflagged empty batch,
/// padding semantics, per-epoch order, determinism, clear ConfigErrors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "test_plan_helpers.hpp"

namespace {

using mpistage::ConfigError;
using mpistage::EpochPlan;
using mpistage::kPaddingId;
using mpistage::PlanOptions;
using mpistage::Remainder;
using mpistage::Sharding;
using mpistage::Shuffle;
using mpistage_test_plan::Case;
using mpistage_test_plan::Mode;
using mpistage_test_plan::Violations;
using mpistage_test_plan::WorldPlan;

const std::vector<std::uint64_t> kNumSamples = {0, 1, 2, 3, 5, 10, 26, 209, 922, 9909};
const std::vector<int> kWorldSizes = {1, 2, 3, 4, 7, 9, 16, 64};
const std::vector<std::uint64_t> kBatchSizes = {1, 2, 3, 5, 6};
constexpr std::uint64_t kEpochs = 4;  // epochs 0..3

const std::vector<Mode> kModes = {
    {Sharding::byte_range, Shuffle::none},
    {Sharding::byte_range, Shuffle::local},
    {Sharding::global, Shuffle::none},
    {Sharding::global, Shuffle::global},
};
const std::vector<Remainder> kRemainders = {Remainder::drop, Remainder::pad, Remainder::mask};

bool shuffled(const Mode& m) { return m.shuffle != Shuffle::none; }

/// Runs `fn(case)` for every (N, W, B) of the sweep with the given mode and remainder. N = 0 has
/// no plan: there it checks that every entry point throws ConfigError instead.
template <typename Fn>
void for_each_case(const Mode& mode, Remainder remainder, Violations& v, Fn&& fn) {
    for (const std::uint64_t n : kNumSamples) {
        for (const int w : kWorldSizes) {
            for (const std::uint64_t b : kBatchSizes) {
                Case c;
                c.num_samples = n;
                c.world_size = w;
                c.batch_size = b;
                c.remainder = remainder;
                c.mode = mode;
                c.seed = 20240611;
                if (n == 0) {
                    const PlanOptions o = mpistage_test_plan::options_of(c);
                    bool threw = false;
                    try {
                        (void)mpistage::plan_totals(n, w, o);
                    } catch (const ConfigError&) {
                        threw = true;
                    }
                    v.check(threw, describe(c), "plan_totals with N=0 must throw ConfigError");
                    for (const int r : {0, w - 1}) {
                        threw = false;
                        try {
                            (void)mpistage::plan_epoch(n, w, r, o, 0);
                        } catch (const ConfigError&) {
                            threw = true;
                        }
                        v.check(threw, describe(c),
                                "plan_epoch with N=0 must throw ConfigError (rank " +
                                    std::to_string(r) + ")");
                    }
                    continue;
                }
                fn(c);
            }
        }
    }
}

using ModeRemainder = std::tuple<int, Remainder>;  // index into kModes, remainder

class PlanProperties : public ::testing::TestWithParam<ModeRemainder> {
protected:
    Mode mode() const { return kModes[static_cast<std::size_t>(std::get<0>(GetParam()))]; }
    Remainder remainder() const { return std::get<1>(GetParam()); }
};

// ---- equal steps ------------------------------------------------------------------------------

TEST_P(PlanProperties, EqualStepsOnEveryRank) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const auto w = static_cast<std::uint64_t>(c.world_size);
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
            const std::string at = describe(c, e);
            const std::uint64_t steps = mpistage_test_plan::expected_steps(c);
            v.check(wp.totals.steps == steps, at,
                    "totals.steps " + std::to_string(wp.totals.steps) + ", contract says " +
                        std::to_string(steps));
            const std::uint64_t slots = steps * c.batch_size;
            if (c.remainder == Remainder::drop) {
                v.check(wp.totals.valid_samples == slots * w, at, "drop: valid_samples != W*S*B");
                v.check(wp.totals.dropped_samples == c.num_samples - slots * w, at,
                        "drop: dropped_samples != N - W*S*B");
                v.check(wp.totals.padding_slots == 0, at, "drop: padding_slots != 0");
            } else {
                v.check(wp.totals.valid_samples == c.num_samples, at, "valid_samples != N");
                v.check(wp.totals.padding_slots == slots * w - c.num_samples, at,
                        "padding_slots != W*S*B - N");
                v.check(wp.totals.dropped_samples == 0, at, "dropped_samples != 0");
            }
            for (int r = 0; r < c.world_size; ++r) {
                const EpochPlan& p = wp.ranks[static_cast<std::size_t>(r)];
                const std::string rat = at + " rank=" + std::to_string(r);
                v.check(p.steps == wp.totals.steps, rat, "rank steps differ from totals.steps");
                v.check(p.batch_size == c.batch_size, rat, "batch_size differs from options");
                v.check(p.ids.size() == slots, rat, "ids.size() != steps*B");
                v.check(p.valid.size() == slots, rat, "valid.size() != steps*B");
            }
        }
    });
    EXPECT_EQ(v.count(), 0);
}

// ---- exactly once -----------------------------------------------------------------------------

TEST_P(PlanProperties, ExactlyOnce) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const auto begins = mpistage::balanced_shard_begins(c.num_samples, c.world_size);
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
            const std::string at = describe(c, e);
            std::vector<std::uint32_t> seen(c.num_samples, 0);
            std::uint64_t valid_total = 0;
            for (int r = 0; r < c.world_size; ++r) {
                const EpochPlan& p = wp.ranks[static_cast<std::size_t>(r)];
                const std::string rat = at + " rank=" + std::to_string(r);
                const auto ru = static_cast<std::size_t>(r);
                if (c.mode.sharding == Sharding::byte_range) {
                    v.check(p.shard_begin == begins[ru] && p.shard_end == begins[ru + 1], rat,
                            "shard bounds differ from balanced_shard_begins");
                }
                std::uint64_t rank_valid = 0;
                for (std::size_t k = 0; k < p.ids.size(); ++k) {
                    if (!p.valid[k]) continue;
                    const std::int64_t id = p.ids[k];
                    if (!v.lazy_check(
                            id >= 0 && static_cast<std::uint64_t>(id) < c.num_samples, [&] {
                                return v.message(rat, "valid slot holds id " + std::to_string(id) +
                                                          " outside [0,N)");
                            })) {
                        continue;
                    }
                    const auto uid = static_cast<std::uint64_t>(id);
                    if (c.mode.sharding == Sharding::byte_range) {
                        v.lazy_check(uid >= begins[ru] && uid < begins[ru + 1], [&] {
                            return v.message(
                                rat, "id " + std::to_string(id) + " outside the rank's shard");
                        });
                    }
                    ++seen[uid];
                    ++rank_valid;
                }
                valid_total += rank_valid;
                if (c.remainder == Remainder::drop) {
                    v.check(rank_valid == p.steps * c.batch_size, rat,
                            "drop: rank yields " + std::to_string(rank_valid) +
                                " valid samples, not steps*B");
                }
            }
            if (c.remainder == Remainder::drop) {
                v.check(valid_total == wp.totals.valid_samples, at,
                        "drop: valid count " + std::to_string(valid_total) +
                            " != totals.valid_samples");
                for (std::uint64_t id = 0; id < c.num_samples; ++id) {
                    if (!v.lazy_check(seen[id] <= 1, [&] {
                            return v.message(at, "drop: sample " + std::to_string(id) +
                                                     " yielded " + std::to_string(seen[id]) +
                                                     " times");
                        })) {
                        break;
                    }
                }
            } else {
                for (std::uint64_t id = 0; id < c.num_samples; ++id) {
                    if (!v.lazy_check(seen[id] == 1, [&] {
                            return v.message(at, "sample " + std::to_string(id) +
                                                     " yielded valid " + std::to_string(seen[id]) +
                                                     " times, expected once");
                        })) {
                        break;
                    }
                }
            }
        }
    });
    EXPECT_EQ(v.count(), 0);
}

// ---- no unflagged empty batch -----------------------------------------------------------------

TEST_P(PlanProperties, NoUnflaggedEmptyBatch) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const std::uint64_t b = c.batch_size;
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
            const std::string at = describe(c, e);
            for (int r = 0; r < c.world_size; ++r) {
                const EpochPlan& p = wp.ranks[static_cast<std::size_t>(r)];
                const std::string rat = at + " rank=" + std::to_string(r);
                if (p.valid.size() != p.steps * b) continue;  // reported by EqualSteps
                std::uint64_t padding = 0;
                bool seen_padding = false;
                for (std::uint64_t s = 0; s < p.steps; ++s) {
                    std::uint64_t n_valid = 0;
                    for (std::uint64_t j = 0; j < b; ++j) {
                        const std::uint8_t flag = p.valid[s * b + j];
                        v.lazy_check(flag == 0 || flag == 1, [&] {
                            return v.message(rat, "valid flag is neither 0 nor 1");
                        });
                        if (flag) {
                            ++n_valid;
                            v.lazy_check(!seen_padding, [&] {
                                return v.message(rat, "valid slot after a padding slot (step " +
                                                          std::to_string(s) +
                                                          "): padding must only fill the tail");
                            });
                        } else {
                            seen_padding = true;
                            ++padding;
                        }
                    }
                    if (n_valid == 0) {
                        // Allowed only as a batch whose every slot is flagged padding.
                        v.check(c.remainder != Remainder::drop, rat,
                                "drop: batch " + std::to_string(s) + " has no sample");
                        for (std::uint64_t j = 0; j < b; ++j) {
                            v.lazy_check(p.valid[s * b + j] == 0, [&] {
                                return v.message(rat, "empty batch " + std::to_string(s) +
                                                          " not flagged padding");
                            });
                        }
                    }
                    if (c.remainder == Remainder::drop) {
                        v.check(n_valid == b, rat,
                                "drop: batch " + std::to_string(s) + " is not full");
                    }
                }
                // Padding is minimal: at most one batch's worth per rank, so at most one
                // all-padding batch, and only as the rank's last batch.
                v.check(padding <= b, rat,
                        std::to_string(padding) + " padding slots on one rank, more than B");
            }
        }
    });
    EXPECT_EQ(v.count(), 0);
}

// ---- padding semantics ------------------------------------------------------------------------

TEST_P(PlanProperties, PaddingSemantics) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const std::uint64_t n = c.num_samples;
        const std::uint64_t b = c.batch_size;
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
            const std::string at = describe(c, e);
            std::uint64_t pad_count = 0;  // padding slots of all ranks so far, in rank order
            for (int r = 0; r < c.world_size; ++r) {
                const EpochPlan& p = wp.ranks[static_cast<std::size_t>(r)];
                const std::string rat = at + " rank=" + std::to_string(r);
                if (p.valid.size() != p.steps * b || p.ids.size() != p.steps * b) continue;
                for (std::size_t k = 0; k < p.ids.size(); ++k) {
                    if (p.valid[k]) continue;
                    const std::int64_t id = p.ids[k];
                    const std::string slot = " (slot " + std::to_string(k) + ")";
                    switch (c.remainder) {
                        case Remainder::drop:
                            v.check(false, rat, "drop: slot flagged padding" + slot);
                            break;
                        case Remainder::mask:
                            v.check(id == kPaddingId, rat,
                                    "mask: padded slot holds " + std::to_string(id) + ", not -1" +
                                        slot);
                            break;
                        case Remainder::pad: {
                            if (!v.check(id >= 0 && static_cast<std::uint64_t>(id) < n, rat,
                                         "pad: padded slot holds " + std::to_string(id) +
                                             ", not a real sample" + slot)) {
                                break;
                            }
                            // Padding repeats the head of the epoch order, as DistributedSampler.
                            if (c.mode.sharding == Sharding::byte_range) {
                                // byte_range: padding slots of all ranks, numbered in rank order,
                                // repeat samples 0, 1, 2, ... of the dataset.
                                v.check(static_cast<std::uint64_t>(id) == pad_count % n, rat,
                                        "pad: padding slot " + std::to_string(pad_count) +
                                            " repeats " + std::to_string(id) + ", expected " +
                                            std::to_string(pad_count % n) + slot);
                            } else {
                                // global: position p >= N repeats the sample at position (p-N) % N.
                                const std::uint64_t pos =
                                    mpistage_test_plan::global_position(k, r, c.world_size, b);
                                const std::uint64_t head = (pos - n) % n;
                                const std::uint64_t wb =
                                    static_cast<std::uint64_t>(c.world_size) * b;
                                const auto& owner =
                                    wp.ranks[static_cast<std::size_t>((head % wb) / b)];
                                const std::size_t hk =
                                    static_cast<std::size_t>((head / wb) * b + head % b);
                                v.check(
                                    hk < owner.ids.size() && owner.valid[hk] && owner.ids[hk] == id,
                                    rat,
                                    "pad: position " + std::to_string(pos) +
                                        " does not repeat the sample at position " +
                                        std::to_string(head) + slot);
                            }
                            break;
                        }
                    }
                    ++pad_count;
                }
            }
            v.check(pad_count == wp.totals.padding_slots, at,
                    "padding slots " + std::to_string(pad_count) + " != totals.padding_slots");
        }
    });
    EXPECT_EQ(v.count(), 0);
}

// ---- order between epochs ---------------------------------------------------------------------

/// Natural log of the number of ordered selections of k out of `pool` (pool! / (pool-k)!): how
/// many different sequences a uniform shuffle could give.
double log_orders(std::uint64_t pool, std::uint64_t k) {
    if (k > pool) return 0.0;
    return std::lgamma(static_cast<double>(pool) + 1.0) -
           std::lgamma(static_cast<double>(pool - k) + 1.0);
}

TEST_P(PlanProperties, OrderBetweenEpochs) {
    // A shuffle is random: a 4-sample shard has only 24 orders, so two epochs of it coincide with
    // probability 1/24 even for a perfect shuffle. The checks are therefore:
    //  - a rank with >= 4 valid samples does not yield the same order in all 4 epochs;
    //  - any sequence (one rank's, or the whole world's) that a uniform shuffle could produce in
    //    at least 10^6 ways differs between every pair of epochs.
    constexpr std::size_t kMinSamplesToDiffer = 4;
    const double kLogManyOrders = std::log(1e6);
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const auto begins = mpistage::balanced_shard_begins(c.num_samples, c.world_size);
        std::vector<WorldPlan> epochs;
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            epochs.push_back(mpistage_test_plan::plan_world(c, e));
        }
        const std::string at = describe(c);
        if (!shuffled(c.mode)) {
            for (int r = 0; r < c.world_size; ++r) {
                const auto ru = static_cast<std::size_t>(r);
                const std::string rat = at + " rank=" + std::to_string(r);
                // No shuffle: every epoch identical, in the documented ascending assignment.
                for (std::uint64_t e = 1; e < kEpochs; ++e) {
                    v.check(mpistage_test_plan::same_plan(epochs[e].ranks[ru], epochs[0].ranks[ru]),
                            rat, "shuffle none: epoch " + std::to_string(e) + " differs from 0");
                }
                const EpochPlan& p = epochs[0].ranks[ru];
                for (std::size_t k = 0; k < p.ids.size(); ++k) {
                    if (!p.valid[k]) continue;
                    const std::uint64_t want =
                        c.mode.sharding == Sharding::byte_range
                            ? begins[ru] + k
                            : mpistage_test_plan::global_position(k, r, c.world_size, c.batch_size);
                    if (!v.lazy_check(p.ids[k] == static_cast<std::int64_t>(want), [&] {
                            return v.message(rat, "shuffle none: slot " + std::to_string(k) +
                                                      " holds " + std::to_string(p.ids[k]) +
                                                      ", expected " + std::to_string(want));
                        })) {
                        break;
                    }
                }
            }
            return;
        }
        // world[e]: the valid ids of all ranks in rank order, epoch e.
        std::vector<std::vector<std::int64_t>> world(kEpochs);
        double world_log_orders = 0.0;
        std::uint64_t world_valid = 0;
        for (int r = 0; r < c.world_size; ++r) {
            const auto ru = static_cast<std::size_t>(r);
            const std::string rat = at + " rank=" + std::to_string(r);
            std::vector<std::vector<std::int64_t>> ids(kEpochs);
            for (std::uint64_t e = 0; e < kEpochs; ++e) {
                ids[e] = mpistage_test_plan::valid_ids(epochs[e].ranks[ru]);
                world[e].insert(world[e].end(), ids[e].begin(), ids[e].end());
            }
            const std::uint64_t k = ids[0].size();
            const std::uint64_t pool = c.mode.sharding == Sharding::byte_range
                                           ? begins[ru + 1] - begins[ru]
                                           : c.num_samples;
            world_valid += k;
            if (c.mode.sharding == Sharding::byte_range) world_log_orders += log_orders(pool, k);
            if (k >= kMinSamplesToDiffer) {
                bool all_same = true;
                for (std::uint64_t e = 1; e < kEpochs; ++e) all_same = all_same && ids[e] == ids[0];
                v.check(!all_same, rat,
                        "shuffle on: the same order in all " + std::to_string(kEpochs) +
                            " epochs (" + std::to_string(k) + " samples)");
            }
            if (log_orders(pool, k) >= kLogManyOrders) {
                for (std::uint64_t e1 = 0; e1 < kEpochs; ++e1) {
                    for (std::uint64_t e2 = e1 + 1; e2 < kEpochs; ++e2) {
                        v.check(ids[e1] != ids[e2], rat,
                                "shuffle on: epochs " + std::to_string(e1) + " and " +
                                    std::to_string(e2) + " yield the same order (" +
                                    std::to_string(k) + " samples)");
                    }
                }
            }
        }
        if (c.mode.sharding == Sharding::global) {
            world_log_orders = log_orders(c.num_samples, world_valid);
        }
        if (world_log_orders >= kLogManyOrders) {
            for (std::uint64_t e1 = 0; e1 < kEpochs; ++e1) {
                for (std::uint64_t e2 = e1 + 1; e2 < kEpochs; ++e2) {
                    v.check(world[e1] != world[e2], at,
                            "shuffle on: epochs " + std::to_string(e1) + " and " +
                                std::to_string(e2) + " yield the same world order");
                }
            }
        }
    });
    EXPECT_EQ(v.count(), 0);
}

// ---- determinism ------------------------------------------------------------------------------

TEST_P(PlanProperties, DeterministicAndAgreedAcrossRanks) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const PlanOptions o = mpistage_test_plan::options_of(c);
        const auto totals = mpistage::plan_totals(c.num_samples, c.world_size, o);
        const auto fingerprint = mpistage::plan_fingerprint(c.num_samples, c.world_size, o);
        for (std::uint64_t e = 0; e < kEpochs; e += 3) {  // epochs 0 and 3
            const WorldPlan first = mpistage_test_plan::plan_world(c, e);
            const std::string at = describe(c, e);
            for (int r = 0; r < c.world_size; ++r) {
                const auto ru = static_cast<std::size_t>(r);
                const std::string rat = at + " rank=" + std::to_string(r);
                // Every rank computes the same totals and fingerprint (pure functions of the
                // agreed inputs) and, for a given rank, the same plan every time.
                v.check(mpistage_test_plan::same_totals(
                            mpistage::plan_totals(c.num_samples, c.world_size, o), totals),
                        rat, "plan_totals not deterministic");
                v.check(mpistage::plan_fingerprint(c.num_samples, c.world_size, o) == fingerprint,
                        rat, "plan_fingerprint not deterministic");
                const EpochPlan again = mpistage::plan_epoch(c.num_samples, c.world_size, r, o, e);
                v.check(mpistage_test_plan::same_plan(again, first.ranks[ru]), rat,
                        "plan_epoch gave a different plan on a second call");
            }
        }
    });
    EXPECT_EQ(v.count(), 0);
}

std::string param_name(const ::testing::TestParamInfo<ModeRemainder>& info) {
    const Mode m = kModes[static_cast<std::size_t>(std::get<0>(info.param))];
    return mpistage::to_string(m.sharding) + "_" + mpistage::to_string(m.shuffle) + "_" +
           mpistage::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(PlanSweep, PlanProperties,
                         ::testing::Combine(::testing::Range(0, 4),
                                            ::testing::Values(Remainder::drop, Remainder::pad,
                                                              Remainder::mask)),
                         param_name);

// ---- global sharding does not depend on W -----------------------------------------------------

TEST(PlanGlobal, SequenceIndependentOfWorldSizeAndBatchSize) {
    Violations v;
    for (const Shuffle shuffle : {Shuffle::none, Shuffle::global}) {
        for (const std::uint64_t n : kNumSamples) {
            if (n == 0) continue;
            for (std::uint64_t e = 0; e < kEpochs; ++e) {
                PlanOptions ref_o;
                ref_o.batch_size = 1;
                ref_o.seed = 7;
                ref_o.sharding = Sharding::global;
                ref_o.shuffle = shuffle;
                ref_o.remainder = Remainder::mask;
                const EpochPlan ref = mpistage::plan_epoch(n, 1, 0, ref_o, e);
                for (const int w : kWorldSizes) {
                    for (const std::uint64_t b : kBatchSizes) {
                        for (const Remainder rem : kRemainders) {
                            PlanOptions o = ref_o;
                            o.batch_size = b;
                            o.remainder = rem;
                            const std::string at =
                                "N=" + std::to_string(n) + " W=" + std::to_string(w) +
                                " B=" + std::to_string(b) + " " + mpistage::to_string(rem) +
                                " shuffle=" + mpistage::to_string(shuffle) +
                                " epoch=" + std::to_string(e);
                            for (int r = 0; r < w; ++r) {
                                const EpochPlan p = mpistage::plan_epoch(n, w, r, o, e);
                                for (std::size_t k = 0; k < p.ids.size(); ++k) {
                                    if (!p.valid[k]) continue;
                                    const auto pos =
                                        mpistage_test_plan::global_position(k, r, w, b);
                                    if (!v.lazy_check(pos < n && p.ids[k] == ref.ids[pos], [&] {
                                            return v.message(at,
                                                             "position " + std::to_string(pos) +
                                                                 " differs from the W=1 sequence");
                                        })) {
                                        break;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    EXPECT_EQ(v.count(), 0);
}

TEST(PlanGlobal, DropKeepsExactlyThePrefixOfTheEpochOrder) {
    // With drop and global sharding, the consumed set after S steps is exactly the first S*W*B
    // positions of the epoch order (DESIGN.md §2), which is what makes elastic resume possible.
    for (const std::uint64_t n : {209u, 922u}) {
        for (const int w : {3, 7, 16}) {
            PlanOptions o;
            o.batch_size = 5;
            o.seed = 11;
            o.sharding = Sharding::global;
            o.shuffle = Shuffle::global;
            o.remainder = Remainder::mask;
            const EpochPlan ref = mpistage::plan_epoch(n, 1, 0, o, 2);
            std::set<std::int64_t> prefix;
            o.remainder = Remainder::drop;
            const auto totals = mpistage::plan_totals(n, w, o);
            for (std::uint64_t p = 0; p < totals.valid_samples; ++p) prefix.insert(ref.ids[p]);
            std::set<std::int64_t> kept;
            for (int r = 0; r < w; ++r) {
                for (const auto id :
                     mpistage_test_plan::valid_ids(mpistage::plan_epoch(n, w, r, o, 2))) {
                    kept.insert(id);
                }
            }
            EXPECT_EQ(kept, prefix) << "N=" << n << " W=" << w;
        }
    }
}

// ---- shuffles depend on the seed --------------------------------------------------------------

TEST(PlanShuffle, SeedChangesTheOrder) {
    for (const Mode m :
         {Mode{Sharding::byte_range, Shuffle::local}, Mode{Sharding::global, Shuffle::global}}) {
        PlanOptions a;
        a.batch_size = 6;
        a.sharding = m.sharding;
        a.shuffle = m.shuffle;
        a.remainder = Remainder::mask;
        a.seed = 1;
        PlanOptions b = a;
        b.seed = 2;
        for (int r = 0; r < 4; ++r) {
            EXPECT_NE(mpistage::plan_epoch(922, 4, r, a, 0).ids,
                      mpistage::plan_epoch(922, 4, r, b, 0).ids)
                << mpistage::to_string(m.sharding) << " rank " << r;
        }
    }
}

// ---- configuration errors ---------------------------------------------------------------------

TEST(PlanConfig, BadWorldSizeRankOrOptionsThrowConfigError) {
    for (const Mode m : kModes) {
        for (const Remainder rem : kRemainders) {
            PlanOptions o;
            o.batch_size = 3;
            o.sharding = m.sharding;
            o.shuffle = m.shuffle;
            o.remainder = rem;
            for (const int w : {0, -1, -64, std::numeric_limits<int>::min()}) {
                EXPECT_THROW((void)mpistage::plan_totals(10, w, o), ConfigError) << "W=" << w;
                EXPECT_THROW((void)mpistage::plan_epoch(10, w, 0, o, 0), ConfigError) << "W=" << w;
                EXPECT_THROW((void)mpistage::balanced_shard_begins(10, w), ConfigError)
                    << "W=" << w;
            }
            for (const int w : {1, 4, 64}) {
                EXPECT_THROW((void)mpistage::plan_totals(0, w, o), ConfigError);
                EXPECT_THROW((void)mpistage::plan_epoch(0, w, 0, o, 0), ConfigError);
                EXPECT_THROW((void)mpistage::plan_epoch(10, w, -1, o, 0), ConfigError);
                EXPECT_THROW((void)mpistage::plan_epoch(10, w, w, o, 0), ConfigError);
            }
            PlanOptions zero_b = o;
            zero_b.batch_size = 0;
            EXPECT_THROW(zero_b.validate(), ConfigError);
            EXPECT_THROW((void)mpistage::plan_totals(10, 2, zero_b), ConfigError);
            EXPECT_THROW((void)mpistage::plan_epoch(10, 2, 0, zero_b, 0), ConfigError);
            EXPECT_NO_THROW(o.validate());
        }
    }
    PlanOptions mismatch;
    mismatch.sharding = Sharding::byte_range;
    mismatch.shuffle = Shuffle::global;
    EXPECT_THROW(mismatch.validate(), ConfigError);
    EXPECT_THROW((void)mpistage::plan_epoch(10, 2, 0, mismatch, 0), ConfigError);
    mismatch.sharding = Sharding::global;
    mismatch.shuffle = Shuffle::local;
    EXPECT_THROW(mismatch.validate(), ConfigError);
    EXPECT_THROW((void)mpistage::plan_epoch(10, 2, 0, mismatch, 0), ConfigError);
}

TEST(PlanConfig, OptionNamesRoundTrip) {
    for (const Sharding s : {Sharding::byte_range, Sharding::global}) {
        EXPECT_EQ(mpistage::parse_sharding(mpistage::to_string(s)), s);
    }
    for (const Shuffle s : {Shuffle::none, Shuffle::local, Shuffle::global}) {
        EXPECT_EQ(mpistage::parse_shuffle(mpistage::to_string(s)), s);
    }
    for (const Remainder r : kRemainders) {
        EXPECT_EQ(mpistage::parse_remainder(mpistage::to_string(r)), r);
    }
    EXPECT_THROW(mpistage::parse_sharding("blocks"), ConfigError);
    EXPECT_THROW(mpistage::parse_shuffle("random"), ConfigError);
    EXPECT_THROW(mpistage::parse_remainder("wrap"), ConfigError);
}

// ---- balanced shards --------------------------------------------------------------------------

TEST(PlanShards, BalancedShardBeginsGiveNOverWOrOneMore) {
    for (const std::uint64_t n : {0u, 1u, 2u, 3u, 5u, 10u, 26u, 209u, 922u, 9909u}) {
        for (const int w : kWorldSizes) {
            const auto begins = mpistage::balanced_shard_begins(n, w);
            const auto wu = static_cast<std::uint64_t>(w);
            ASSERT_EQ(begins.size(), wu + 1);
            EXPECT_EQ(begins.front(), 0u);
            EXPECT_EQ(begins.back(), n);
            for (std::uint64_t r = 0; r < wu; ++r) {
                const std::uint64_t size = begins[r + 1] - begins[r];
                ASSERT_LE(begins[r], begins[r + 1]);
                // N/W samples, plus one for the first N mod W ranks.
                EXPECT_EQ(size, n / wu + (r < n % wu ? 1 : 0))
                    << "N=" << n << " W=" << w << " r=" << r;
            }
        }
    }
}

// ---- Permutation ------------------------------------------------------------------------------

TEST(PlanPermutation, IsABijection) {
    const std::vector<std::uint64_t> keys = {0,
                                             1,
                                             2,
                                             42,
                                             0xdeadbeefULL,
                                             0x9e3779b97f4a7c15ULL,
                                             std::numeric_limits<std::uint64_t>::max()};
    for (const std::uint64_t n : {0u, 1u, 2u, 3u, 5u, 17u, 1000u, 4097u}) {
        for (const std::uint64_t key : keys) {
            const mpistage::Permutation perm(n, key);
            EXPECT_EQ(perm.size(), n);
            std::vector<std::uint8_t> hit(n, 0);
            bool identity = true;
            for (std::uint64_t i = 0; i < n; ++i) {
                const std::uint64_t y = perm(i);
                ASSERT_LT(y, n) << "n=" << n << " key=" << key << " i=" << i;
                ASSERT_EQ(hit[y], 0) << "n=" << n << " key=" << key << ": " << y << " hit twice";
                hit[y] = 1;
                identity = identity && y == i;
                ASSERT_EQ(perm(i), y) << "not deterministic";
                ASSERT_EQ(mpistage::Permutation(n, key)(i), y) << "depends on more than (n, key)";
            }
            EXPECT_TRUE(std::all_of(hit.begin(), hit.end(), [](std::uint8_t h) { return h; }));
            if (n >= 17) EXPECT_FALSE(identity) << "n=" << n << " key=" << key << " is identity";
        }
    }
}

TEST(PlanPermutation, DifferentKeysGiveDifferentOrders) {
    for (const std::uint64_t n : {17u, 1000u, 4097u}) {
        const mpistage::Permutation a(n, 1);
        const mpistage::Permutation b(n, 2);
        std::uint64_t same = 0;
        for (std::uint64_t i = 0; i < n; ++i) same += a(i) == b(i);
        EXPECT_LT(same, n / 2) << "n=" << n;
    }
}

TEST(PlanPermutation, LargeDomainStaysInRangeAndInjectiveOnASample) {
    // Per-position evaluation without materialising N (global sharding of huge datasets).
    for (const std::uint64_t n : {(std::uint64_t{1} << 40) + 3, (std::uint64_t{1} << 63) + 12345}) {
        const mpistage::Permutation perm(n, 5);
        std::set<std::uint64_t> images;
        for (std::uint64_t i = 0; i < 2000; ++i) {
            const std::uint64_t pos = i * (n / 2000);
            const std::uint64_t y = perm(pos);
            ASSERT_LT(y, n);
            images.insert(y);
        }
        EXPECT_EQ(images.size(), 2000u);
    }
}

// ---- record sizes: byte-range cuts (uniform and skewed) ---------------------------------------

TEST(PlanRecordCuts, FixedRecordsInCutSumToNAndStartAtTheCut) {
    const std::vector<std::uint64_t> record_sizes = {1,    3,      8,       784,
                                                     4096, 150000, 2000000, std::uint64_t{1} << 40};
    const std::vector<std::uint64_t> counts = {1,   2,   3,    5,     10,        26,
                                               209, 922, 9909, 60000, 1000000007};
    for (const std::uint64_t rec : record_sizes) {
        for (const std::uint64_t n : counts) {
            for (const int w : kWorldSizes) {
                const auto total = static_cast<unsigned __int128>(n) * rec;
                std::uint64_t first = 0;  // exclusive scan of the per-rank counts
                for (int r = 0; r < w; ++r) {
                    const std::string at = "N=" + std::to_string(n) +
                                           " record_bytes=" + std::to_string(rec) +
                                           " W=" + std::to_string(w) + " rank=" + std::to_string(r);
                    // The rank's cut starts at byte floor(r*T/W); its first record is the first
                    // one that starts at or after that byte.
                    const unsigned __int128 cut =
                        total * static_cast<unsigned>(r) / static_cast<unsigned>(w);
                    ASSERT_GE(static_cast<unsigned __int128>(first) * rec, cut) << at;
                    if (first > 0) {
                        ASSERT_LT(static_cast<unsigned __int128>(first - 1) * rec, cut) << at;
                    }
                    const std::uint64_t count = mpistage::fixed_records_in_cut(n, rec, r, w);
                    // Uniform records: a cut holds N/W records up to one boundary record.
                    const auto wu = static_cast<std::uint64_t>(w);
                    ASSERT_LE(count, n / wu + 2) << at;
                    ASSERT_GE(count + 2, n / wu) << at;
                    first += count;
                }
                ASSERT_EQ(first, n) << "N=" << n << " record_bytes=" << rec << " W=" << w
                                    << ": per-rank counts do not sum to N";
            }
        }
    }
    // Outside the world: no records.
    EXPECT_EQ(mpistage::fixed_records_in_cut(10, 4, -1, 4), 0u);
    EXPECT_EQ(mpistage::fixed_records_in_cut(10, 4, 4, 4), 0u);
    EXPECT_EQ(mpistage::fixed_records_in_cut(0, 4, 0, 4), 0u);
}

TEST(PlanRecordCuts, SkewedRecordSizesStillGiveEqualCountsAfterCorrection) {
    // Records of very different sizes (one huge record, many tiny ones) make the raw byte cuts
    // unbalanced, some ranks with no record at all. The counts still sum to N (so the exscan gives
    // consistent global ids), and the planner's skew-corrected shards give every rank N/W or
    // N/W+1 samples and the same number of steps. The cut here is a reference computation from
    // prefix sums, independent of mpistage's index code.
    const std::vector<std::vector<std::uint64_t>> layouts = {
        {1000000, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {1, 1, 1, 1, 1, 1, 1, 1, 1, 5000000},
        {7, 150000, 3, 3, 2000000, 1, 1, 1, 64, 64, 64, 64, 9, 1 << 20, 2, 2, 2},
    };
    for (const auto& sizes : layouts) {
        std::vector<std::uint64_t> starts(sizes.size());
        std::uint64_t total = 0;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            starts[i] = total;
            total += sizes[i];
        }
        const std::uint64_t n = sizes.size();
        for (const int w : kWorldSizes) {
            const auto wu = static_cast<std::uint64_t>(w);
            std::uint64_t sum = 0;
            int empty_ranks = 0;
            for (std::uint64_t r = 0; r < wu; ++r) {
                const auto lo =
                    static_cast<std::uint64_t>(static_cast<unsigned __int128>(total) * r / wu);
                const auto hi = static_cast<std::uint64_t>(static_cast<unsigned __int128>(total) *
                                                           (r + 1) / wu);
                const auto count =
                    static_cast<std::uint64_t>(std::lower_bound(starts.begin(), starts.end(), hi) -
                                               std::lower_bound(starts.begin(), starts.end(), lo));
                empty_ranks += count == 0;
                sum += count;
            }
            EXPECT_EQ(sum, n) << "W=" << w;
            if (w >= 4) EXPECT_GT(empty_ranks, 0) << "layout is not skewed enough for W=" << w;
            for (const Remainder rem : kRemainders) {
                PlanOptions o;
                o.batch_size = 2;
                o.remainder = rem;
                const auto begins = mpistage::balanced_shard_begins(n, w);
                const auto totals = mpistage::plan_totals(n, w, o);
                for (int r = 0; r < w; ++r) {
                    const EpochPlan p = mpistage::plan_epoch(n, w, r, o, 0);
                    const std::uint64_t size = p.shard_end - p.shard_begin;
                    EXPECT_TRUE(size == n / wu || size == n / wu + 1) << "W=" << w << " r=" << r;
                    EXPECT_EQ(p.shard_begin, begins[static_cast<std::size_t>(r)]);
                    EXPECT_EQ(p.steps, totals.steps);
                }
            }
        }
    }
}

}  // namespace
