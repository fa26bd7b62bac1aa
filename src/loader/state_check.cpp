// check_resume_point: a saved state's numbers against each other (see state_check.hpp).
#include "loader/state_check.hpp"

#include <algorithm>
#include <limits>

#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
    std::uint64_t out = 0;
    return __builtin_mul_overflow(a, b, &out) ? kMax : out;
}
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
    return a > kMax - b ? kMax : a + b;
}

std::string where(const LoaderState& s) {
    return "epoch " + std::to_string(s.epoch) + ", steps_consumed " +
           std::to_string(s.steps_consumed) + ", samples_consumed " +
           std::to_string(s.samples_consumed) + ", run_start_steps " +
           std::to_string(s.run_start_steps) + ", run_start_samples " +
           std::to_string(s.run_start_samples) + ", world_size " + std::to_string(s.world_size);
}

[[noreturn]] void refuse(const LoaderState& s, const std::string& why) {
    throw ConfigError("loader: cannot resume: the saved state is inconsistent (" + where(s) +
                      "): " + why);
}

void require_samples(const LoaderState& s, std::uint64_t implied, const std::string& how) {
    if (s.samples_consumed == implied) return;
    refuse(s, "samples_consumed must be " + std::to_string(implied) + " (" + how + ")");
}

void require_steps_left(const LoaderState& s, std::uint64_t epoch_steps) {
    if (s.steps_consumed < epoch_steps) return;
    refuse(s, "the epoch has " + std::to_string(epoch_steps) + " steps at world size " +
                  std::to_string(s.world_size) +
                  ", so steps_consumed leaves none (a state taken at the end of an epoch "
                  "points at the next epoch with 0 steps)");
}

[[noreturn]] void inconsistent(const std::string& origin, const std::string& what) {
    throw ConfigError("state " + origin + " is inconsistent: " + what);
}

}  // namespace

void check_state_numbers(const LoaderState& s, const std::string& origin) {
    const auto n = [](std::uint64_t v) { return std::to_string(v); };
    if (s.world_size < 1 || s.world_size > kMaxStateWorldSize) {
        inconsistent(origin, "world_size " + std::to_string(s.world_size) + " is outside [1, " +
                                 std::to_string(kMaxStateWorldSize) + "]");
    }
    if (s.num_samples == 0) inconsistent(origin, "num_samples is 0");
    try {
        s.plan.validate();
    } catch (const ConfigError& e) {
        throw ConfigError("state " + origin + ": " + e.what());
    }
    if (s.samples_consumed > s.num_samples) {
        inconsistent(origin, "samples_consumed " + n(s.samples_consumed) + " exceeds num_samples " +
                                 n(s.num_samples));
    }
    if ((s.steps_consumed == 0) != (s.samples_consumed == 0)) {
        inconsistent(origin, "steps_consumed " + n(s.steps_consumed) + " with samples_consumed " +
                                 n(s.samples_consumed) +
                                 " (every step consumes samples; no samples without steps)");
    }
    if (s.run_start_steps > s.steps_consumed || s.run_start_samples > s.samples_consumed) {
        inconsistent(origin, "the run start (run_start_steps " + n(s.run_start_steps) +
                                 ", run_start_samples " + n(s.run_start_samples) +
                                 ") lies after the state (steps_consumed " + n(s.steps_consumed) +
                                 ", samples_consumed " + n(s.samples_consumed) + ")");
    }
    if ((s.run_start_steps == 0) != (s.run_start_samples == 0)) {
        inconsistent(origin, "run_start_steps " + n(s.run_start_steps) +
                                 " with run_start_samples " + n(s.run_start_samples) +
                                 " (no samples without steps)");
    }
}

void check_resume_point(const LoaderState& s, const SampleBytesFn& sample_bytes,
                        const SampleTokensFn& sample_tokens) {
    check_state_numbers(s, "given to Loader::restore");
    if (s.steps_consumed == 0) return;  // the start of an epoch (from_json: 0 samples too)
    const PlanOptions& p = s.plan;
    const std::uint64_t n = s.num_samples;
    const int w = s.world_size;
    const std::uint64_t run_steps = s.steps_consumed - s.run_start_steps;
    if (p.budget.active()) {
        const bool global = p.sharding == Sharding::global;
        // global: the run's plan from its start; byte_range: the epoch's plan from step 0.
        const EpochStart from =
            global ? EpochStart{s.run_start_steps, s.run_start_samples, s.order_world_size}
                   : EpochStart{};
        EpochPlan plan;
        try {
            plan = plan_epoch(n, w, 0, p, s.epoch, from, sample_bytes, sample_tokens);
        } catch (const ConfigError& e) {
            refuse(s, std::string("its run start is not a point of the epoch's batch list: ") +
                          e.what());
        }
        const std::uint64_t k = global ? run_steps : s.steps_consumed;
        if (k >= plan.steps) {
            require_steps_left(s, saturating_add(global ? s.run_start_steps : 0, plan.steps));
        }
        require_samples(s, plan.job_samples_before.at(k),
                        "the samples of the batches " + std::to_string(k) + " steps of " +
                            std::to_string(w) + " ranks consumed" +
                            (global ? " from the run start" : ""));
        return;
    }
    if (p.sharding == Sharding::global) {
        const std::uint64_t width = saturating_mul(static_cast<std::uint64_t>(w), p.batch_size);
        const std::uint64_t implied =
            std::min(n, saturating_add(s.run_start_samples, saturating_mul(run_steps, width)));
        require_samples(s, implied,
                        "min(num_samples, run_start_samples + (steps_consumed − run_start_steps) "
                        "× world_size × batch_size)");
        const EpochTotals left = plan_totals(n, w, p, {s.steps_consumed, s.samples_consumed});
        if (left.steps == 0) require_steps_left(s, s.steps_consumed);
        return;
    }
    const EpochTotals all = plan_totals(n, w, p);
    require_steps_left(s, all.steps);
    const EpochTotals left = plan_totals(n, w, p, {s.steps_consumed, 0});
    require_samples(s, all.valid_samples - left.valid_samples,
                    "the valid samples of the first steps_consumed steps of " + std::to_string(w) +
                        " ranks with batch_size " + std::to_string(p.batch_size));
}

}  // namespace mpistage::detail
