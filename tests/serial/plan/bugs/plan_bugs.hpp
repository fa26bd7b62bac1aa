#pragma once
/// @file
/// Helpers of the planner tests of BUGS.md rows S1-S10 (test_plan_bugs_*.cpp): build a case,
/// and check exactly once, equal steps and flagged padding over all ranks of a simulated world.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../plan_helpers.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"

namespace mpistage_test_plan_bugs {

using mpistage::EpochPlan;
using mpistage::kPaddingId;
using mpistage::Remainder;
using mpistage::Sharding;
using mpistage::Shuffle;
using mpistage_test_plan::Case;
using mpistage_test_plan::make_case;
using mpistage_test_plan::Mode;
using mpistage_test_plan::WorldPlan;

inline const std::vector<Mode> kShuffledModes = {{Sharding::byte_range, Shuffle::local},
                                                 {Sharding::global, Shuffle::global}};
inline const std::vector<Mode> kAllModes = {{Sharding::byte_range, Shuffle::none},
                                            {Sharding::byte_range, Shuffle::local},
                                            {Sharding::global, Shuffle::none},
                                            {Sharding::global, Shuffle::global}};

/// How many times each sample appears with valid = 1 over all ranks.
inline std::vector<int> valid_multiplicity(const WorldPlan& wp, std::uint64_t n) {
    std::vector<int> seen(n, 0);
    for (const EpochPlan& p : wp.ranks) {
        for (std::size_t k = 0; k < p.ids.size(); ++k) {
            if (!p.valid[k]) continue;
            EXPECT_GE(p.ids[k], 0);
            EXPECT_LT(static_cast<std::uint64_t>(p.ids[k]), n);
            if (p.ids[k] >= 0 && static_cast<std::uint64_t>(p.ids[k]) < n) ++seen[p.ids[k]];
        }
    }
    return seen;
}

/// Every sample 0..N-1 exactly once with valid = 1 over all ranks.
inline void expect_exactly_once(const WorldPlan& wp, std::uint64_t n, const std::string& at) {
    const auto seen = valid_multiplicity(wp, n);
    for (std::uint64_t id = 0; id < n; ++id) {
        EXPECT_EQ(seen[id], 1) << at << ": sample " << id;
    }
}

/// All ranks have `steps` batches of B slots, as plan_totals decided before any plan was built.
inline void expect_equal_steps(const WorldPlan& wp, std::uint64_t steps, std::uint64_t b,
                               const std::string& at) {
    EXPECT_EQ(wp.totals.steps, steps) << at;
    for (std::size_t r = 0; r < wp.ranks.size(); ++r) {
        EXPECT_EQ(wp.ranks[r].steps, steps) << at << " rank " << r;
        EXPECT_EQ(wp.ranks[r].ids.size(), steps * b) << at << " rank " << r;
        EXPECT_EQ(wp.ranks[r].valid.size(), steps * b) << at << " rank " << r;
    }
}

/// Every batch with no valid sample has all its slots flagged padding; under mask, padded slots
/// are -1, under pad real samples; under drop no slot is padding.
inline void expect_flagged_padding(const WorldPlan& wp, std::uint64_t n, std::uint64_t b,
                                   Remainder rem, const std::string& at) {
    for (std::size_t r = 0; r < wp.ranks.size(); ++r) {
        const EpochPlan& p = wp.ranks[r];
        for (std::uint64_t s = 0; s < p.steps; ++s) {
            std::uint64_t n_valid = 0;
            for (std::uint64_t j = 0; j < b; ++j) {
                const std::size_t k = s * b + j;
                if (p.valid[k]) {
                    ++n_valid;
                    continue;
                }
                EXPECT_NE(rem, Remainder::drop) << at << " rank " << r << ": padding under drop";
                if (rem == Remainder::mask) EXPECT_EQ(p.ids[k], kPaddingId) << at << " rank " << r;
                if (rem == Remainder::pad) {
                    EXPECT_GE(p.ids[k], 0) << at << " rank " << r;
                    EXPECT_LT(p.ids[k], static_cast<std::int64_t>(n)) << at << " rank " << r;
                }
            }
            if (rem == Remainder::drop) {
                EXPECT_EQ(n_valid, b) << at << " rank " << r << " batch " << s;
            }
        }
    }
}

}  // namespace mpistage_test_plan_bugs
