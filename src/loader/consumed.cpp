// The consumed-id digest of the loader state (docs/resume.md, "Consumed-id digest"): summed
// across ranks while an epoch runs, recomputed from the state's keys by a restore.
#include "comm/agree.hpp"
#include "loader/loader_impl.hpp"
#include "plan/consumed_digest.hpp"

namespace mpistage {

namespace {

/// Steps whose digests one allreduce sums ahead of the consumer (at least; more when an agreed
/// window is longer): O(kDigestBlock) memory, one extra allreduce per kDigestBlock steps.
constexpr std::uint64_t kDigestBlock = 1024;

}  // namespace

void Loader::Impl::cover_digest(const EpochPlan& plan, std::uint64_t until) {
    Progress& p = progress;
    // Entries before the consumer's step are no longer reachable (the step only grows).
    while (p.digest_first < p.consumed && p.digest_before.size() > 1) {
        p.digest_before.pop_front();
        ++p.digest_first;
    }
    while (p.digest_first + p.digest_before.size() - 1 < until) {
        const std::uint64_t from = p.digest_first + p.digest_before.size() - 1;
        const std::uint64_t to = std::min(plan.steps, std::max(until, from + kDigestBlock));
        std::vector<std::uint64_t> mine(to - from);
        for (std::uint64_t s = from; s < to; ++s) {
            mine[s - from] = detail::plan_steps_digest(plan, s, s + 1, p.epoch);
        }
        comm.set_context({"loader: consumed-id digest", static_cast<std::int64_t>(p.epoch),
                          static_cast<std::int64_t>(plan.first_step + from), "", -1});
        for (const std::uint64_t step_sum : comm.allreduce_sum(mine)) {
            p.digest_before.push_back(p.digest_before.back() + step_sum);
        }
    }
}

std::uint64_t Loader::Impl::consumed_share(const LoaderState& s, const EpochPlan* rest) const {
    const auto r = static_cast<std::uint64_t>(comm.rank());
    const auto w = static_cast<std::uint64_t>(comm.size());
    if (s.plan.budget.active()) {
        // Every sample lies in exactly one budget batch: consumed = all − what is left.
        const auto [begin, end] = detail::part_range(num_samples, r, w);
        return detail::id_range_digest(begin, end, s.epoch) -
               detail::plan_steps_digest(*rest, 0, rest->steps, s.epoch);
    }
    if (s.plan.sharding == Sharding::global) {
        // The consumed samples are the first samples_consumed positions of the epoch order,
        // whatever world sizes consumed them.
        const auto [begin, end] = detail::part_range(s.samples_consumed, r, w);
        return detail::global_positions_digest(num_samples, s.plan, s.epoch, begin, end,
                                               s.order_world_size);
    }
    // byte_range resumes at the world size that saved the state (checked before).
    const EpochPlan mine =
        plan_epoch_on_demand(num_samples, comm.size(), comm.rank(), s.plan, s.epoch, {});
    return detail::plan_steps_digest(mine, 0, s.steps_consumed, s.epoch);
}

void Loader::Impl::check_consumed_digest(LoaderState& state, const EpochPlan* rest) const {
    std::uint64_t digest = detail::consumed_digest_seed(state.epoch);
    if (state.steps_consumed > 0) {  // identical on every rank (the state is)
        comm.set_context({"loader: restore (consumed-id digest)",
                          static_cast<std::int64_t>(state.epoch),
                          static_cast<std::int64_t>(state.steps_consumed), "", -1});
        const std::uint64_t share =
            run_agreed_value(comm, [&] { return consumed_share(state, rest); });
        digest += comm.allreduce_sum(std::vector<std::uint64_t>{share}).at(0);
    }
    const std::string implied = detail::digest_to_hex(digest);
    if (state.consumed_digest.empty()) {  // format versions 1 to 3: nothing to compare
        state.consumed_digest = implied;
        return;
    }
    if (state.consumed_digest == implied) return;
    // Every rank holds the same state and the same sum: the same error everywhere.
    throw ConfigError(
        "loader: cannot resume: key 'consumed_digest' of the saved state is " +
        state.consumed_digest + ", but the samples that its keys 'epoch' (" +
        std::to_string(state.epoch) + "), 'steps_consumed' (" +
        std::to_string(state.steps_consumed) + "), 'samples_consumed' (" +
        std::to_string(state.samples_consumed) + "), 'world_size' (" +
        std::to_string(state.world_size) + "), 'run_start_steps'/'run_start_samples' (" +
        std::to_string(state.run_start_steps) + "/" + std::to_string(state.run_start_samples) +
        ") and 'seed' (" + std::to_string(state.plan.seed) + ", shuffle " +
        to_string(state.plan.shuffle) + ") select have digest " + implied +
        ": one of these keys was edited (or the state was saved by a build that plans the "
        "epoch differently); resuming would serve the wrong samples (docs/resume.md, "
        "\"Consumed-id digest\")");
}

}  // namespace mpistage
