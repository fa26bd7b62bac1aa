// LoaderOptions::pipeline.two_phase: the names of the modes and what `automatic` resolves to (the
// cost model is src/two_phase/two_phase_choice.{hpp,cpp}).
#include <algorithm>

#include "loader/loader_impl.hpp"
#include "two_phase/two_phase_choice.hpp"

namespace mpistage {

std::string to_string(TwoPhase t) {
    switch (t) {
        case TwoPhase::on:
            return "on";
        case TwoPhase::automatic:
            return "auto";
        case TwoPhase::off:
            break;
    }
    return "off";
}

TwoPhase parse_two_phase(const std::string& s) {
    if (s == "off") return TwoPhase::off;
    if (s == "on") return TwoPhase::on;
    if (s == "auto") return TwoPhase::automatic;
    throw ConfigError("two_phase: unknown mode '" + s + "' (off, on or auto)");
}

void Loader::Impl::resolve_two_phase() {
    stats.two_phase = options.pipeline.two_phase == TwoPhase::on;
    if (options.pipeline.two_phase != TwoPhase::automatic) return;
    const PlanOptions& p = options.plan;
    std::string why;
    if (p.sharding != Sharding::global) why = "sharding " + to_string(p.sharding);
    if (options.tier.stage != Stage::none) why = "stage " + to_string(options.tier.stage);
    if (p.budget.active()) why = "a batch budget";
    if (totals.steps == 0) why = "an epoch of no steps";
    // Agreed (one allreduce), so no rank measures alone even if options differ somewhere.
    const bool eligible = comm.allreduce_min(why.empty() ? 1 : 0) == 1;
    if (!eligible) {
        stats.two_phase_note = "two-phase auto: off without measuring (" +
                               (why.empty() ? std::string("not eligible on another rank") : why) +
                               "; two-phase reads need global sharding, stage none and fixed "
                               "batches)";
        return;
    }
    comm.set_context({"loader: two-phase auto (cost model)", -1, -1, "", -1});
    // The plain path's reads in flight: one per I/O thread with a free ring slot.
    const std::uint64_t readers =
        use_threads ? std::min<std::uint64_t>(options.pipeline.io_threads, ring->slots.size()) : 1;
    const detail::TwoPhaseCosts costs =
        detail::measure_two_phase_costs(comm, source, p, num_samples, totals.steps, readers);
    const detail::TwoPhasePrediction pred = detail::predict_two_phase(costs);
    stats.two_phase = pred.chosen;
    stats.two_phase_note = detail::describe_two_phase(costs, pred);
    if (pred.chosen) {  // confirmed by real steps, which cost what the model does not see
        const EpochPlan plan = plan_of(0, {});
        const detail::TwoPhaseTrial trial = detail::trial_two_phase(
            comm, source, p, num_samples, plan, *ring->slots.front(), readers);
        stats.two_phase = detail::trial_confirms(trial);
        stats.two_phase_note = detail::describe_two_phase(costs, pred, &trial);
    }
    stats.two_phase_plain_step_seconds = pred.plain_step_s;
    stats.two_phase_step_seconds = pred.two_phase_step_s;
    comm.set_context({"loader: construction", -1, -1, "", -1});
}

}  // namespace mpistage
