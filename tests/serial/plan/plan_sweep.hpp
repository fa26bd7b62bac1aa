#pragma once
/// @file
/// The property sweep of the pure planner (include/mpistage/plan.hpp), shared by the
/// test_plan_sweep_*.cpp files: the swept (N, W, B, mode, remainder) points, for_each_case and
/// the value-parameterised fixture PlanProperties (instantiated once, in test_plan_sweep.cpp).
/// The contract checked is DESIGN.md §1: exactly once, equal steps, no unflagged empty batch,
/// padding semantics, per-epoch order, determinism, clear ConfigErrors.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "plan_helpers.hpp"

namespace mpistage_test_plan {

inline const std::vector<std::uint64_t> kNumSamples = {0, 1, 2, 3, 5, 10, 26, 209, 922, 9909};
inline const std::vector<int> kWorldSizes = {1, 2, 3, 4, 7, 9, 16, 64};
inline const std::vector<std::uint64_t> kBatchSizes = {1, 2, 3, 5, 6};
inline constexpr std::uint64_t kEpochs = 4;  // epochs 0..3

inline const std::vector<Mode> kModes = {
    {mpistage::Sharding::byte_range, mpistage::Shuffle::none},
    {mpistage::Sharding::byte_range, mpistage::Shuffle::local},
    {mpistage::Sharding::global, mpistage::Shuffle::none},
    {mpistage::Sharding::global, mpistage::Shuffle::global},
    {mpistage::Sharding::global, mpistage::Shuffle::chunks},  // chunks of 3, windows of 2
};
inline const std::vector<mpistage::Remainder> kRemainders = {
    mpistage::Remainder::drop, mpistage::Remainder::pad, mpistage::Remainder::mask};

inline bool shuffled(const Mode& m) {
    return m.shuffle != mpistage::Shuffle::none;
}

/// Runs `fn(case)` for every (N, W, B) of the sweep with the given mode and remainder. N = 0 has
/// no plan: there it checks that every entry point throws ConfigError instead.
template <typename Fn>
void for_each_case(const Mode& mode, mpistage::Remainder remainder, Violations& v, Fn&& fn) {
    for (const std::uint64_t n : kNumSamples) {
        for (const int w : kWorldSizes) {
            for (const std::uint64_t b : kBatchSizes) {
                const Case c = make_case(n, w, b, remainder, mode, 20240611);
                if (n == 0) {
                    const mpistage::PlanOptions o = options_of(c);
                    bool threw = false;
                    try {
                        (void)mpistage::plan_totals(n, w, o);
                    } catch (const mpistage::ConfigError&) {
                        threw = true;
                    }
                    v.check(threw, describe(c), "plan_totals with N=0 must throw ConfigError");
                    for (const int r : {0, w - 1}) {
                        threw = false;
                        try {
                            (void)mpistage::plan_epoch(n, w, r, o, 0);
                        } catch (const mpistage::ConfigError&) {
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

using ModeRemainder = std::tuple<int, mpistage::Remainder>;  // index into kModes, remainder

/// The sweep fixture: one instance per (mode, remainder); its TEST_Ps live in several files.
class PlanProperties : public ::testing::TestWithParam<ModeRemainder> {
protected:
    Mode mode() const { return kModes[static_cast<std::size_t>(std::get<0>(GetParam()))]; }
    mpistage::Remainder remainder() const { return std::get<1>(GetParam()); }
};

}  // namespace mpistage_test_plan
