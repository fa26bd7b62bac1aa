/// @file
/// Planner sweep (plan_sweep.hpp), counts: every rank has the steps the contract states, and
/// every sample is yielded exactly once (at most once under drop) over all ranks.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "plan_sweep.hpp"

namespace {

using mpistage::EpochPlan;
using mpistage::Remainder;
using mpistage::Sharding;
using namespace mpistage_test_plan;

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

}  // namespace
