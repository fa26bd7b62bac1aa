// The stage decision (none / memory / auto against the budget) and the tier's construction.
#include <chrono>

#include "comm/agree.hpp"
#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "tier/memory_tier.hpp"
#include "util/memory_budget.hpp"

namespace mpistage::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// Collective: true on every rank when every rank's `need` fits its `budget`. Otherwise a
/// ConfigError for `memory`, or false with the reason in `stats.tier_note` for `automatic`.
bool fits_budget(const Communicator& comm, Stage stage, std::uint64_t need, std::uint64_t budget,
                 const std::string& what, TierStats& stats) {
    const std::uint64_t over = comm.allreduce_max(need > budget ? 1 : 0);
    const std::uint64_t worst = comm.allreduce_max(need);
    const std::uint64_t least = comm.allreduce_min(budget);
    if (over == 0) return true;
    const std::string why = "the largest rank needs " + std::to_string(worst) + " bytes (" + what +
                            "), more than the stage budget of " + std::to_string(least) +
                            " bytes per rank (stage_budget_bytes; default half of the node's "
                            "memory divided among its ranks)";
    if (stage == Stage::memory) {
        throw ConfigError("loader: stage memory: " + why +
                          "; use stage auto to fall back to file reads, more nodes, or a larger "
                          "budget");
    }
    stats.tier_note = "auto: " + why + "; serving from the file";
    stats.over_budget = true;
    return false;
}

std::uint64_t fixed_bytes_per_sample(const Source& source) {
    std::uint64_t b = 0;
    for (const auto& f : source.fields()) b += f.ragged ? 0 : f.sample_bytes;
    return b;
}

}  // namespace

std::unique_ptr<MemoryTier> build_memory_tier(const Communicator& comm, const Source& source,
                                              const TierSetup& options, std::uint64_t ring_bytes,
                                              TierStats& stats) {
    require_same(comm,
                 {{"stage", to_string(options.stage)},
                  {"stage_budget_bytes", std::to_string(options.stage_budget_bytes)},
                  {"stage_ranks_per_node", std::to_string(options.stage_ranks_per_node)},
                  {"stage_read", to_string(options.stage_read)}},
                 "loader: stage options differ across ranks",
                 "every rank must pass the same stage options");
    stats.tier = "file";
    stats.tier_note.clear();
    if (options.stage == Stage::none) return nullptr;
    run_agreed(comm, [&] {
        if (options.stage_ranks_per_node < 0) {
            throw ConfigError("loader: stage_ranks_per_node " +
                              std::to_string(options.stage_ranks_per_node) + " is negative");
        }
    });
    // The tier's node windows need the node communicator and the default budget the node's
    // rank count: the loader's one node split, made here on every rank (the stage options were
    // agreed above) unless its communicator has it already. Test "nodes" with an explicit
    // budget need neither.
    if (options.stage_budget_bytes == 0 || options.stage_ranks_per_node == 0) comm.split_node();
    const std::uint64_t budget = options.stage_budget_bytes > 0
                                     ? options.stage_budget_bytes
                                     : detail::memory_share_bytes(comm.node_size());
    stats.budget_bytes = budget;
    // Fixed fields are known before reading; ragged bytes only once read (checked again then).
    const auto begins = balanced_shard_begins(source.num_samples(), comm.size());
    const auto r = static_cast<std::size_t>(comm.rank());
    const std::uint64_t fixed =
        checked_mul(begins[r + 1] - begins[r], fixed_bytes_per_sample(source), "loader: stage");
    // With `auto` over budget, a stage_read that was asked for is not used either: say so.
    const std::string unused_read =
        options.stage_read == StageRead::automatic
            ? std::string()
            : "; stage_read " + to_string(options.stage_read) + " was not used";
    if (!fits_budget(comm, options.stage, fixed + ring_bytes, budget,
                     "fixed fields of its shard + prefetch ring", stats)) {
        stats.tier_note += unused_read;
        return nullptr;
    }
    const auto t0 = Clock::now();
    auto tier = std::make_unique<MemoryTier>(comm, source, options.stage_ranks_per_node,
                                             options.map_node, options.stage_read);
    const auto t1 = Clock::now();
    if (!fits_budget(comm, options.stage, tier->staged_bytes() + ring_bytes, budget,
                     "staged shard + prefetch ring", stats)) {
        stats.tier_note += unused_read;
        return nullptr;  // every rank frees its windows here, collectively
    }
    stats.tier = "memory";
    stats.staged_bytes = tier->staged_bytes();
    stats.stage_time = t1 - t0;
    stats.times = tier->stage_times();
    if (options.stage == Stage::automatic) {
        stats.tier_note = "auto: " + std::to_string(stats.staged_bytes) +
                          " bytes staged on this rank, within the budget of " +
                          std::to_string(budget);
    }
    return tier;
}

}  // namespace mpistage::detail
