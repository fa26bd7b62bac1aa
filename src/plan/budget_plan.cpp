// Budget batches (see BatchBudget in mpistage/plan.hpp): batches hold as many samples as fit a
// byte or token budget, packed by the same BatchFitter the stream loader uses, with equal steps
// on every rank. Every rank computes every rank's batches from the sample costs (identical
// everywhere), so the step count is agreed by construction.
#include "plan/budget_plan.hpp"

#include <algorithm>
#include <numeric>

#include "mpistage/error.hpp"
#include "plan/chunk_order.hpp"
#include "plan/plan_detail.hpp"

namespace mpistage {

std::string BatchBudget::describe() const {
    return "batch_bytes=" + std::to_string(batch_bytes) +
           " batch_tokens=" + std::to_string(batch_tokens) +
           " max_batch_samples=" + std::to_string(max_batch_samples) +
           " bucket_window=" + std::to_string(bucket_window) +
           " token_field=" + std::to_string(token_field);
}

double PaddingWaste::ratio() const noexcept {
    return slot_units == 0 ? 0.0
                           : static_cast<double>(padded_units) / static_cast<double>(slot_units);
}

}  // namespace mpistage

namespace mpistage::detail {

namespace {

BatchLimits limits_of(const BatchBudget& b) {
    return BatchLimits{b.max_batch_samples, b.batch_bytes, b.batch_tokens};
}

/// Length of a sample in the budget's unit.
std::uint64_t length_of(const SampleCost& c, const BatchBudget& o) {
    return o.batch_tokens > 0 ? c.tokens : c.size_bytes;
}

/// Packs `ids[0, count)` in order; appends the batches to `out`.
void pack_in_order(const std::uint64_t* ids, const SampleCost* costs, std::size_t count,
                   const BatchLimits& limits, std::vector<BudgetBatch>& out) {
    std::size_t i = 0;
    while (i < count) {
        BatchFitter fit(limits);
        BudgetBatch b;
        while (i < count && fit.add(costs[i])) {
            b.ids.push_back(ids[i]);
            b.size_bytes += costs[i].size_bytes;
            ++i;
        }
        b.oversize = fit.oversize();
        out.push_back(std::move(b));
    }
}

/// Samples that `window` batches packed in order from `costs[0..count)` hold.
std::size_t window_samples(const SampleCost* costs, std::size_t count, std::uint64_t window,
                           const BatchLimits& limits) {
    std::size_t i = 0;
    for (std::uint64_t k = 0; k < window && i < count; ++k) {
        BatchFitter fit(limits);
        while (i < count && fit.add(costs[i])) ++i;
    }
    return i;
}

void check_budget(const BatchBudget& b) {
    if (!b.active()) {
        throw ConfigError(
            "plan: budget batches need a byte budget (batch_bytes, --batch-bytes) or a "
            "token budget (batch_tokens, --batch-tokens)");
    }
    if (b.max_batch_samples == 0) {
        throw ConfigError("plan: max_batch_samples (--max-batch-samples) must be ≥ 1");
    }
}

/// The sample order of rank `r`'s shard under `byte_range` sharding.
std::vector<std::uint64_t> shard_order(const std::vector<std::uint64_t>& begins, int r,
                                       const PlanOptions& plan, std::uint64_t epoch) {
    const std::uint64_t first = begins[static_cast<std::size_t>(r)];
    const std::uint64_t count = begins[static_cast<std::size_t>(r) + 1] - first;
    std::vector<std::uint64_t> order(count);
    if (plan.shuffle == Shuffle::local && count > 0) {
        const Permutation perm(
            count, epoch_permutation_key(plan, epoch, static_cast<std::uint64_t>(r) + 1));
        for (std::uint64_t i = 0; i < count; ++i) order[i] = first + perm(i);
    } else {
        std::iota(order.begin(), order.end(), first);
    }
    return order;
}

/// Adds `batches` (one rank's, or all) to the report `t`.
void add_totals(BudgetTotals& t, const std::vector<BudgetBatch>& batches, const BatchBudget& budget,
                const SampleCostFn& cost) {
    for (const BudgetBatch& b : batches) {
        if (b.ids.empty()) continue;  // Shuffle::chunks: a part that ran out (no batch)
        const std::uint64_t n = b.ids.size();
        t.min_batch_samples = t.batches == 0 ? n : std::min(t.min_batch_samples, n);
        t.max_batch_samples = std::max(t.max_batch_samples, n);
        ++t.batches;
        t.oversize_batches += b.oversize ? 1 : 0;
    }
    const PaddingWaste w = padding_waste(batches, budget, cost);
    t.waste.padded_units += w.padded_units;
    t.waste.slot_units += w.slot_units;
}

/// Padding waste of `order` packed without bucketing (the report's comparison).
PaddingWaste unbucketed(const std::vector<std::uint64_t>& order, const BatchBudget& budget,
                        const SampleCostFn& cost) {
    BatchBudget plain = budget;
    plain.bucket_window = 0;
    return padding_waste(pack_budget_batches(order, plain, cost), plain, cost);
}

void add_waste(PaddingWaste& to, const PaddingWaste& w) {
    to.padded_units += w.padded_units;
    to.slot_units += w.slot_units;
}

/// This rank's remaining batches and, for every step of the plan, the samples the whole job
/// consumed before it.
struct Dealt {
    std::vector<BudgetBatch> mine;
    std::uint64_t steps = 0;
    std::vector<std::uint64_t> before;
    /// Padding batches of all ranks in the plan's steps.
    std::uint64_t padding_steps = 0;
};

/// The samples of `all[k]` for k in [begin, end).
std::uint64_t samples_in(const std::vector<BudgetBatch>& all, std::uint64_t begin,
                         std::uint64_t end) {
    std::uint64_t n = 0;
    for (std::uint64_t k = begin; k < std::min<std::uint64_t>(all.size(), end); ++k) {
        n += all[k].ids.size();
    }
    return n;
}

/// Global sharding: the W-independent batch list `all` of the whole epoch, from the batch that
/// follows `start.position` samples (an entry without a batch is a masked padding batch).
/// `align` 0: the rest is dealt in turn from rank 0 (entry k0 + j to rank j mod W).
/// `align` = W (Shuffle::chunks at the order's world size, the list in rows of W entries, one
/// per part): entry k goes to rank k mod W, step by step along the rows from the row holding
/// the first entry not consumed, so rank r keeps part r and a resume at this W continues slot
/// for slot however the runs before it were dealt (entries of that first row before it are
/// padding; empty entries after the resume point are passed over first, so that row holds a
/// batch and no step is padding on every rank).
Dealt deal_list(std::vector<BudgetBatch>& all, int world_size, int rank, std::uint64_t epoch,
                const EpochStart& start, std::uint64_t align, BudgetTotals& t) {
    const auto w = static_cast<std::uint64_t>(world_size);
    const auto r = static_cast<std::uint64_t>(rank);
    std::uint64_t held = 0;  // entries that are batches
    for (const BudgetBatch& b : all) held += b.ids.empty() ? 0 : 1;
    t.padding_steps = ceil_div(all.size(), w) * w - held;
    std::uint64_t k0 = 0;
    std::uint64_t done = 0;
    while (k0 < all.size() && done < start.position) done += all[k0++].ids.size();
    if (done != start.position) {
        throw ConfigError("plan: resume position " + std::to_string(start.position) + " of epoch " +
                          std::to_string(epoch) +
                          " is not the end of a budget batch (the state was saved with other "
                          "budget options or another dataset)");
    }
    while (align > 0 && k0 < all.size() && all[k0].ids.empty()) ++k0;
    // The first entry of step 0: k0 itself, or the start of its row.
    const std::uint64_t first = align > 0 ? k0 - k0 % w : k0;
    std::uint64_t held_left = 0;
    for (std::uint64_t k = k0; k < all.size(); ++k) held_left += all[k].ids.empty() ? 0 : 1;
    Dealt d;
    d.steps = k0 < all.size() ? ceil_div(all.size() - first, w) : 0;
    d.padding_steps = d.steps * w - held_left;
    d.before.assign(d.steps + 1, start.position);
    for (std::uint64_t s = 0; s < d.steps; ++s) {
        d.before[s + 1] =
            d.before[s] + samples_in(all, std::max(k0, first + s * w), first + (s + 1) * w);
    }
    for (std::uint64_t s = 0; s < d.steps; ++s) {
        const std::uint64_t k = first + s * w + r;
        if (k >= k0 && k < all.size()) {
            d.mine.push_back(std::move(all[k]));
        } else {
            d.mine.emplace_back();  // consumed before the resume point, or past the end
        }
    }
    return d;
}

/// Global sharding: the epoch order (ids, or a permutation of them) packed into one list.
Dealt deal_global(std::uint64_t n, int world_size, int rank, const PlanOptions& options,
                  std::uint64_t epoch, const EpochStart& start, const SampleCostFn& cost,
                  BudgetTotals& t) {
    const BatchBudget& budget = options.budget;
    std::vector<std::uint64_t> order(n);
    const Permutation perm(n, epoch_permutation_key(options, epoch, 0));
    for (std::uint64_t i = 0; i < n; ++i)
        order[i] = options.shuffle == Shuffle::global ? perm(i) : i;
    std::vector<BudgetBatch> all = pack_budget_batches(order, budget, cost);
    add_totals(t, all, budget, cost);
    t.unbucketed_waste = budget.bucket_window > 1 ? unbucketed(order, budget, cost) : t.waste;
    return deal_list(all, world_size, rank, epoch, start, 0, t);
}

/// Shuffle::chunks: part r of the epoch's chunk order (its positions p ≡ r mod P, P the world
/// size the order was made for: `start.order_world_size`, else W) packed in position order;
/// batch j of part r is entry j·P + r of the list (an empty entry where part r ran out first).
/// At W = P rank r is dealt exactly part r's batches, so it reads only its own chunks, as with
/// fixed batches; at another world size (a resume) the list is dealt without its empty
/// entries: exactly once, less local.
Dealt deal_chunks(std::uint64_t n, int world_size, int rank, const PlanOptions& options,
                  std::uint64_t epoch, const EpochStart& start, const SampleCostFn& cost,
                  BudgetTotals& t) {
    const BatchBudget& budget = options.budget;
    const std::uint64_t pieces = start.order_world_size > 0
                                     ? static_cast<std::uint64_t>(start.order_world_size)
                                     : static_cast<std::uint64_t>(world_size);
    const ChunkOrder co = chunk_order(n, options, epoch, pieces);
    std::vector<std::vector<BudgetBatch>> parts(pieces);
    std::vector<std::uint64_t> order;
    for (std::uint64_t r = 0; r < pieces && r < n; ++r) {
        order.clear();
        for (std::uint64_t p = r; p < n; p += pieces) order.push_back(co.id_at(p));
        parts[r] = pack_budget_batches(order, budget, cost);
        add_totals(t, parts[r], budget, cost);
        add_waste(t.unbucketed_waste, budget.bucket_window > 1
                                          ? unbucketed(order, budget, cost)
                                          : padding_waste(parts[r], budget, cost));
    }
    std::uint64_t rows = 0;
    for (const auto& part : parts) rows = std::max<std::uint64_t>(rows, part.size());
    const bool aligned = static_cast<std::uint64_t>(world_size) == pieces;
    std::vector<BudgetBatch> all;
    all.reserve(aligned ? rows * pieces : t.batches);
    for (std::uint64_t j = 0; j < rows; ++j) {
        for (std::uint64_t r = 0; r < pieces; ++r) {
            if (j < parts[r].size()) {
                all.push_back(std::move(parts[r][j]));
            } else if (aligned) {
                all.emplace_back();
            }
        }
    }
    return deal_list(all, world_size, rank, epoch, start, aligned ? pieces : 0, t);
}

/// Byte-range sharding: each rank's shard packed in its order, from step `start.step`.
Dealt deal_byte_range(std::uint64_t n, int world_size, int rank, const PlanOptions& options,
                      std::uint64_t epoch, const EpochStart& start, const SampleCostFn& cost,
                      BudgetTotals& t, EpochPlan& plan) {
    const BatchBudget& budget = options.budget;
    const std::vector<std::uint64_t> begins = balanced_shard_begins(n, world_size);
    plan.shard_begin = begins[static_cast<std::size_t>(rank)];
    plan.shard_end = begins[static_cast<std::size_t>(rank) + 1];
    std::vector<std::vector<std::uint64_t>> sizes(static_cast<std::size_t>(world_size));
    Dealt d;
    std::uint64_t full_steps = 0;
    for (int r = 0; r < world_size; ++r) {
        const std::vector<std::uint64_t> order = shard_order(begins, r, options, epoch);
        std::vector<BudgetBatch> batches = pack_budget_batches(order, budget, cost);
        add_totals(t, batches, budget, cost);
        add_waste(t.unbucketed_waste, budget.bucket_window > 1
                                          ? unbucketed(order, budget, cost)
                                          : padding_waste(batches, budget, cost));
        for (const BudgetBatch& b : batches)
            sizes[static_cast<std::size_t>(r)].push_back(b.ids.size());
        full_steps = std::max<std::uint64_t>(full_steps, batches.size());
        if (r == rank) d.mine = std::move(batches);
    }
    t.padding_steps = full_steps * static_cast<std::uint64_t>(world_size) - t.batches;
    if (start.step > full_steps) {
        throw ConfigError("plan: resume at step " + std::to_string(start.step) +
                          " but the epoch has " + std::to_string(full_steps) +
                          " budget steps at W=" + std::to_string(world_size));
    }
    d.steps = full_steps - start.step;
    d.mine.erase(d.mine.begin(),
                 d.mine.begin() + static_cast<std::ptrdiff_t>(
                                      std::min<std::uint64_t>(start.step, d.mine.size())));
    d.before.assign(d.steps + 1, 0);
    for (const auto& rank_sizes : sizes) {
        const std::uint64_t remaining =
            rank_sizes.size() > start.step ? rank_sizes.size() - start.step : 0;
        d.padding_steps += d.steps - remaining;
        std::uint64_t sum = 0;
        for (std::uint64_t i = 0; i < rank_sizes.size(); ++i) {
            if (i < start.step) {
                d.before[0] += rank_sizes[i];
            } else {
                sum += rank_sizes[i];
                d.before[i - start.step + 1] += sum;
            }
        }
        // Steps after this rank's last batch keep its whole count.
        for (std::uint64_t s = remaining; s < d.steps; ++s) {
            d.before[s + 1] += sum;
        }
    }
    for (std::uint64_t s = 1; s <= d.steps; ++s) d.before[s] += d.before[0];
    return d;
}

}  // namespace

std::vector<BudgetBatch> pack_budget_batches(const std::vector<std::uint64_t>& order,
                                             const BatchBudget& budget, const SampleCostFn& cost) {
    check_budget(budget);
    const BatchLimits limits = limits_of(budget);
    std::vector<SampleCost> costs(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) costs[i] = cost(order[i]);
    std::vector<BudgetBatch> out;
    if (budget.bucket_window <= 1) {
        pack_in_order(order.data(), costs.data(), order.size(), limits, out);
        return out;
    }
    std::vector<std::size_t> pos;
    std::vector<std::uint64_t> ids;
    std::vector<SampleCost> sorted;
    for (std::size_t begin = 0; begin < order.size();) {
        const std::size_t m = window_samples(costs.data() + begin, order.size() - begin,
                                             budget.bucket_window, limits);
        pos.resize(m);
        std::iota(pos.begin(), pos.end(), begin);
        std::stable_sort(pos.begin(), pos.end(), [&](std::size_t a, std::size_t b) {
            return length_of(costs[a], budget) < length_of(costs[b], budget);
        });
        ids.clear();
        sorted.clear();
        for (std::size_t p : pos) {
            ids.push_back(order[p]);
            sorted.push_back(costs[p]);
        }
        pack_in_order(ids.data(), sorted.data(), m, limits, out);
        begin += m;
    }
    return out;
}

PaddingWaste padding_waste(const std::vector<BudgetBatch>& batches, const BatchBudget& budget,
                           const SampleCostFn& cost) {
    PaddingWaste w;
    for (const BudgetBatch& b : batches) {
        std::uint64_t longest = 0;
        std::uint64_t sum = 0;
        for (std::uint64_t id : b.ids) {
            const std::uint64_t len = length_of(cost(id), budget);
            longest = std::max(longest, len);
            sum += len;
        }
        w.slot_units += longest * b.ids.size();
        w.padded_units += longest * b.ids.size() - sum;
    }
    return w;
}

void plan_budget(std::uint64_t num_samples, int world_size, int rank, const PlanOptions& options,
                 std::uint64_t epoch, const EpochStart& start, const SampleCostFn& cost,
                 EpochPlan& plan) {
    check_budget(options.budget);
    BudgetTotals& t = plan.budget;
    plan.shard_begin = 0;
    plan.shard_end = num_samples;
    if (options.sharding == Sharding::global && start.position > num_samples) {
        throw ConfigError("plan: resume at position " + std::to_string(start.position) +
                          " of an epoch of " + std::to_string(num_samples) + " samples");
    }
    Dealt d =
        options.sharding == Sharding::byte_range
            ? deal_byte_range(num_samples, world_size, rank, options, epoch, start, cost, t, plan)
        : options.shuffle == Shuffle::chunks
            ? deal_chunks(num_samples, world_size, rank, options, epoch, start, cost, t)
            : deal_global(num_samples, world_size, rank, options, epoch, start, cost, t);
    plan.steps = d.steps;
    plan.batch_size = std::max<std::uint64_t>(1, t.max_batch_samples);
    plan.job_samples_before = std::move(d.before);
    plan.batch_offsets.assign(1, 0);
    plan.oversize.assign(d.steps, 0);
    for (std::uint64_t s = 0; s < d.steps; ++s) {
        if (s < d.mine.size() && !d.mine[s].ids.empty()) {
            for (std::uint64_t id : d.mine[s].ids) {
                plan.ids.push_back(static_cast<std::int64_t>(id));
                plan.valid.push_back(1);
            }
            plan.oversize[s] = d.mine[s].oversize ? 1 : 0;
        } else {  // this rank has no batch left: a masked padding batch of one slot
            plan.ids.push_back(kPaddingId);
            plan.valid.push_back(0);
        }
        plan.batch_offsets.push_back(plan.ids.size());
    }
    plan.totals.steps = d.steps;
    plan.totals.valid_samples = num_samples - plan.job_samples_before.front();
    plan.totals.padding_slots = d.padding_steps;  // one masked slot per padding batch
    plan.totals.dropped_samples = 0;
}

}  // namespace mpistage::detail
