/// @file
/// The one instantiation of the planner sweep (plan_sweep.hpp): PlanProperties over every
/// (mode, remainder); its TEST_Ps are in test_plan_sweep_{counts,padding,order}.cpp.

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "plan_sweep.hpp"

namespace {

using mpistage::Remainder;
using namespace mpistage_test_plan;

std::string param_name(const ::testing::TestParamInfo<ModeRemainder>& info) {
    const Mode m = kModes[static_cast<std::size_t>(std::get<0>(info.param))];
    return mpistage::to_string(m.sharding) + "_" + mpistage::to_string(m.shuffle) + "_" +
           mpistage::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(PlanSweep, PlanProperties,
                         ::testing::Combine(::testing::Range(0, 5),
                                            ::testing::Values(Remainder::drop, Remainder::pad,
                                                              Remainder::mask)),
                         param_name);

}  // namespace
