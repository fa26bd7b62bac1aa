// Dynamic batching for files (see mpistage/dynamic_plan.hpp). Batches are packed with the
// stream loader's BatchFitter, so files and streams apply a budget the same way.
#include "mpistage/dynamic_plan.hpp"

#include <algorithm>
#include <numeric>

#include "loader/stream/stream_plan.hpp"
#include "mpistage/error.hpp"

namespace mpistage {

namespace {

/// The stream options that make `detail::BatchFitter` apply `o`'s budget.
StreamOptions fitter_options(const DynamicBatchOptions& o) {
    StreamOptions s;
    s.batch_size = o.max_batch_samples;
    s.batch_bytes = o.batch_bytes;
    s.batch_tokens = o.batch_tokens;
    return s;
}

detail::SampleCost to_fitter(const DynamicSampleCost& c) {
    return detail::SampleCost{c.size_bytes, c.tokens};
}

/// Length of a sample in the budget's unit.
std::uint64_t length_of(const DynamicSampleCost& c, const DynamicBatchOptions& o) {
    return o.batch_tokens > 0 ? c.tokens : c.size_bytes;
}

/// Packs `ids[begin, end)` in order; appends the batches to `out`.
void pack_in_order(const std::uint64_t* ids, const DynamicSampleCost* costs, std::size_t count,
                   const StreamOptions& so, std::vector<DynamicBatch>& out) {
    std::size_t i = 0;
    while (i < count) {
        detail::BatchFitter fit(so);
        DynamicBatch b;
        while (i < count && fit.add(to_fitter(costs[i]))) {
            b.ids.push_back(ids[i]);
            b.size_bytes += costs[i].size_bytes;
            ++i;
        }
        b.oversize = fit.oversize();
        out.push_back(std::move(b));
    }
}

/// Samples that `window` batches packed in order from `costs[0..count)` hold.
std::size_t window_samples(const DynamicSampleCost* costs, std::size_t count, std::uint64_t window,
                           const StreamOptions& so) {
    std::size_t i = 0;
    for (std::uint64_t k = 0; k < window && i < count; ++k) {
        detail::BatchFitter fit(so);
        while (i < count && fit.add(to_fitter(costs[i]))) ++i;
    }
    return i;
}

}  // namespace

void DynamicBatchOptions::validate() const {
    if (batch_bytes == 0 && batch_tokens == 0) {
        throw ConfigError(
            "dynamic batching: set a byte budget (batch_bytes, --batch-bytes) or a "
            "token budget (batch_tokens, --batch-tokens)");
    }
    if (max_batch_samples == 0) {
        throw ConfigError("dynamic batching: max_batch_samples (--max-batch-samples) must be ≥ 1");
    }
}

std::string DynamicBatchOptions::describe() const {
    return "batch_bytes=" + std::to_string(batch_bytes) +
           " batch_tokens=" + std::to_string(batch_tokens) +
           " max_batch_samples=" + std::to_string(max_batch_samples) +
           " bucket_window=" + std::to_string(bucket_window);
}

double PaddingWaste::ratio() const noexcept {
    return slot_units == 0 ? 0.0
                           : static_cast<double>(padded_units) / static_cast<double>(slot_units);
}

std::vector<DynamicBatch> pack_dynamic_batches(const std::vector<std::uint64_t>& order,
                                               const DynamicBatchOptions& options,
                                               const DynamicCostFn& cost) {
    options.validate();
    const StreamOptions so = fitter_options(options);
    std::vector<DynamicSampleCost> costs(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) costs[i] = cost(order[i]);
    std::vector<DynamicBatch> out;
    if (options.bucket_window <= 1) {
        pack_in_order(order.data(), costs.data(), order.size(), so, out);
        return out;
    }
    std::vector<std::size_t> pos;
    std::vector<std::uint64_t> ids;
    std::vector<DynamicSampleCost> sorted;
    for (std::size_t begin = 0; begin < order.size();) {
        const std::size_t m =
            window_samples(costs.data() + begin, order.size() - begin, options.bucket_window, so);
        pos.resize(m);
        std::iota(pos.begin(), pos.end(), begin);
        std::stable_sort(pos.begin(), pos.end(), [&](std::size_t a, std::size_t b) {
            return length_of(costs[a], options) < length_of(costs[b], options);
        });
        ids.clear();
        sorted.clear();
        for (std::size_t p : pos) {
            ids.push_back(order[p]);
            sorted.push_back(costs[p]);
        }
        pack_in_order(ids.data(), sorted.data(), m, so, out);
        begin += m;
    }
    return out;
}

PaddingWaste padding_waste(const std::vector<DynamicBatch>& batches,
                           const DynamicBatchOptions& options, const DynamicCostFn& cost) {
    PaddingWaste w;
    for (const DynamicBatch& b : batches) {
        std::uint64_t longest = 0;
        std::uint64_t sum = 0;
        for (std::uint64_t id : b.ids) {
            const std::uint64_t len = length_of(cost(id), options);
            longest = std::max(longest, len);
            sum += len;
        }
        w.slot_units += longest * b.ids.size();
        w.padded_units += longest * b.ids.size() - sum;
    }
    return w;
}

namespace {

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

/// Adds `batches` (one rank's, or all) to the totals of `p`.
void add_totals(DynamicEpochPlan& p, const std::vector<DynamicBatch>& batches,
                const DynamicBatchOptions& options, const DynamicCostFn& cost) {
    for (const DynamicBatch& b : batches) {
        const std::uint64_t n = b.ids.size();
        p.min_batch_samples = p.total_batches == 0 ? n : std::min(p.min_batch_samples, n);
        p.max_batch_samples = std::max(p.max_batch_samples, n);
        ++p.total_batches;
        p.total_oversize += b.oversize ? 1 : 0;
    }
    const PaddingWaste w = padding_waste(batches, options, cost);
    p.waste.padded_units += w.padded_units;
    p.waste.slot_units += w.slot_units;
}

/// Unbucketed padding waste of `order` (for the report's comparison).
PaddingWaste unbucketed(const std::vector<std::uint64_t>& order, const DynamicBatchOptions& options,
                        const DynamicCostFn& cost) {
    DynamicBatchOptions plain = options;
    plain.bucket_window = 0;
    return padding_waste(pack_dynamic_batches(order, plain, cost), plain, cost);
}

}  // namespace

DynamicEpochPlan plan_dynamic_epoch(std::uint64_t num_samples, int world_size, int rank,
                                    const PlanOptions& plan, const DynamicBatchOptions& options,
                                    std::uint64_t epoch, const DynamicCostFn& cost) {
    if (num_samples == 0) throw ConfigError("dynamic plan: the dataset has no samples");
    if (world_size < 1 || rank < 0 || rank >= world_size) {
        throw ConfigError("dynamic plan: rank " + std::to_string(rank) + " outside world size " +
                          std::to_string(world_size));
    }
    plan.validate();
    options.validate();
    DynamicEpochPlan p;
    const bool bucketed = options.bucket_window > 1;
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(world_size), 0);
    if (plan.sharding == Sharding::global) {
        std::vector<std::uint64_t> order(num_samples);
        const Permutation perm(num_samples, epoch_permutation_key(plan, epoch, 0));
        for (std::uint64_t i = 0; i < num_samples; ++i) {
            order[i] = plan.shuffle == Shuffle::global ? perm(i) : i;
        }
        std::vector<DynamicBatch> all = pack_dynamic_batches(order, options, cost);
        add_totals(p, all, options, cost);
        p.unbucketed_waste = bucketed ? unbucketed(order, options, cost) : p.waste;
        const auto w = static_cast<std::uint64_t>(world_size);
        for (std::uint64_t k = 0; k < all.size(); ++k) {
            ++counts[k % w];
            if (k % w == static_cast<std::uint64_t>(rank)) p.batches.push_back(std::move(all[k]));
        }
    } else {
        const std::vector<std::uint64_t> begins = balanced_shard_begins(num_samples, world_size);
        for (int r = 0; r < world_size; ++r) {
            const std::vector<std::uint64_t> order = shard_order(begins, r, plan, epoch);
            std::vector<DynamicBatch> mine = pack_dynamic_batches(order, options, cost);
            add_totals(p, mine, options, cost);
            const PaddingWaste u =
                bucketed ? unbucketed(order, options, cost) : padding_waste(mine, options, cost);
            p.unbucketed_waste.padded_units += u.padded_units;
            p.unbucketed_waste.slot_units += u.slot_units;
            counts[static_cast<std::size_t>(r)] = mine.size();
            if (r == rank) p.batches = std::move(mine);
        }
    }
    p.steps = *std::max_element(counts.begin(), counts.end());
    for (std::uint64_t c : counts) p.total_padding_steps += p.steps - c;
    return p;
}

}  // namespace mpistage
