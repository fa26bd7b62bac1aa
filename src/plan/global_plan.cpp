// Global sharding: the epoch order is a permutation of [0, N) cut into global batches of W·B
// positions from a start position; rank r takes its slice of each global batch, or (with
// balance_steps) the samples a greedy byte balance assigns to it inside each global batch.
#include <algorithm>
#include <memory>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

#include "mpistage/error.hpp"
#include "plan/plan_detail.hpp"

namespace mpistage::detail {

namespace {

/// One slot of a global batch: its epoch position, sample id (kPaddingId when masked) and size.
struct GlobalSlot {
    std::uint64_t position = 0;
    std::int64_t id = kPaddingId;
    std::uint64_t bytes = 0;
};

class GlobalOrder {
public:
    GlobalOrder(std::uint64_t n, const PlanOptions& o, std::uint64_t epoch, int order_world_size)
        : n_(n),
          shuffle_(o.shuffle == Shuffle::global),
          mask_(o.remainder == Remainder::mask),
          perm_(n, epoch_permutation_key(o, epoch, 0)) {
        if (o.shuffle == Shuffle::chunks) {
            chunks_ = std::make_shared<const ChunkOrder>(
                chunk_order(n, o, epoch, static_cast<std::uint64_t>(order_world_size)));
        }
    }

    /// The sample at epoch position `p`; positions ≥ N are padding (repeats from the head of
    /// the order for `pad`, kPaddingId for `mask`).
    std::int64_t id_at(std::uint64_t p) const {
        if (p >= n_ && mask_) return kPaddingId;
        const std::uint64_t q = p < n_ ? p : (p - n_) % n_;
        if (chunks_) return static_cast<std::int64_t>(chunks_->id_at(q));
        return static_cast<std::int64_t>(shuffle_ ? perm_(q) : q);
    }
    std::uint64_t size() const noexcept { return n_; }
    const std::shared_ptr<const ChunkOrder>& chunks() const noexcept { return chunks_; }

private:
    std::uint64_t n_;
    bool shuffle_;
    bool mask_;
    Permutation perm_;
    std::shared_ptr<const ChunkOrder> chunks_;
};

/// The rank that takes slot i (position order) of a global batch of W·B slots without a byte
/// balance: contiguous slices of B, or with `Shuffle::chunks` strided (slot i to rank i mod W).
int slice_owner(std::size_t i, const PlanOptions& o, std::uint64_t w) {
    return static_cast<int>(o.shuffle == Shuffle::chunks ? i % w : i / o.batch_size);
}

/// The world size a chunk order of `start` is made for.
int order_world(const EpochStart& start, int world_size) {
    return start.order_world_size > 0 ? start.order_world_size : world_size;
}

/// The slots of global batch `s` (W·B of them, in position order).
std::vector<GlobalSlot> global_batch(const GlobalOrder& order, std::uint64_t first_position,
                                     std::uint64_t s, std::uint64_t width,
                                     const SampleBytesFn& sample_bytes) {
    std::vector<GlobalSlot> slots(width);
    for (std::uint64_t i = 0; i < width; ++i) {
        GlobalSlot& g = slots[i];
        g.position = first_position + s * width + i;
        g.id = order.id_at(g.position);
        g.bytes = g.id == kPaddingId ? 0 : sample_bytes(static_cast<std::uint64_t>(g.id));
    }
    return slots;
}

/// Greedy longest-processing-time assignment with B slots per rank: the largest remaining
/// sample goes to the rank with the fewest bytes that still has a free slot (ties: lowest
/// rank; equal sizes: lowest position), so the result is deterministic. Returns the rank of
/// each slot.
std::vector<int> balance_global_batch(const std::vector<GlobalSlot>& slots, int world_size,
                                      std::uint64_t batch_size) {
    std::vector<std::size_t> by_size(slots.size());
    std::iota(by_size.begin(), by_size.end(), std::size_t{0});
    std::stable_sort(by_size.begin(), by_size.end(),
                     [&](std::size_t a, std::size_t b) { return slots[a].bytes > slots[b].bytes; });
    using Load = std::pair<std::uint64_t, int>;  // (bytes so far, rank)
    std::priority_queue<Load, std::vector<Load>, std::greater<>> open;
    for (int r = 0; r < world_size; ++r) open.push({0, r});
    std::vector<std::uint64_t> used(static_cast<std::size_t>(world_size), 0);
    std::vector<int> owner(slots.size(), 0);
    for (const std::size_t i : by_size) {
        const Load l = open.top();
        open.pop();
        owner[i] = l.second;
        if (++used[static_cast<std::size_t>(l.second)] < batch_size) {
            open.push({l.first + slots[i].bytes, l.second});
        }
    }
    return owner;
}

/// Running max/mean of (largest rank bytes) / (mean rank bytes) over steps.
struct BalanceReport {
    double worst = 0;
    double sum = 0;
    std::uint64_t steps = 0;

    void add(const std::vector<std::uint64_t>& rank_bytes) {
        const std::uint64_t total =
            std::accumulate(rank_bytes.begin(), rank_bytes.end(), std::uint64_t{0});
        if (total == 0) return;
        const double mean = static_cast<double>(total) / static_cast<double>(rank_bytes.size());
        const double ratio =
            static_cast<double>(*std::max_element(rank_bytes.begin(), rank_bytes.end())) / mean;
        worst = std::max(worst, ratio);
        sum += ratio;
        ++steps;
    }
    double mean() const { return steps ? sum / static_cast<double>(steps) : 0; }
};

}  // namespace

void plan_global(std::uint64_t num_samples, int world_size, int rank, const PlanOptions& options,
                 std::uint64_t epoch, const EpochStart& start, const SampleBytesFn& sample_bytes,
                 EpochPlan& plan) {
    const std::uint64_t position = start.position;
    const auto w = static_cast<std::uint64_t>(world_size);
    const auto r = static_cast<std::uint64_t>(rank);
    const std::uint64_t b = options.batch_size;
    const std::uint64_t width = w * b;
    plan.shard_begin = 0;
    plan.shard_end = num_samples;
    if (!sample_bytes) {
        // Rank r takes slots [r·B, (r+1)·B) of each global batch: O(1) per slot, computed on
        // demand (GlobalOrder::id_at as a SlotRule).
        auto rule = std::make_shared<SlotRule>();
        rule->kind = SlotRule::Kind::global;
        rule->num_samples = num_samples;
        rule->batch_size = b;
        rule->shuffle = options.shuffle == Shuffle::global;
        rule->mask = options.remainder == Remainder::mask;
        rule->perm = Permutation(num_samples, epoch_permutation_key(options, epoch, 0));
        rule->position = position;
        rule->width = width;
        rule->rank_offset = r * b;
        if (options.shuffle == Shuffle::chunks) {
            rule->chunks =
                GlobalOrder(num_samples, options, epoch, order_world(start, world_size)).chunks();
            rule->rank_offset = r;
            rule->slot_stride = w;
        }
        plan.rule = std::move(rule);
        return;
    }
    plan.ids.resize(plan.steps * b);
    plan.valid.resize(plan.steps * b);
    const GlobalOrder order(num_samples, options, epoch, order_world(start, world_size));
    BalanceReport report;
    BalanceReport unbalanced;
    std::vector<std::uint64_t> rank_bytes(w);
    std::vector<std::uint64_t> slice_bytes(w);
    for (std::uint64_t s = 0; s < plan.steps; ++s) {
        const auto slots = global_batch(order, position, s, width, sample_bytes);
        std::vector<int> owner(slots.size());
        if (options.balance_steps) {
            owner = balance_global_batch(slots, world_size, b);
        } else {
            for (std::size_t i = 0; i < slots.size(); ++i) owner[i] = slice_owner(i, options, w);
        }
        std::fill(rank_bytes.begin(), rank_bytes.end(), 0);
        std::fill(slice_bytes.begin(), slice_bytes.end(), 0);
        std::uint64_t k = s * b;
        for (std::size_t i = 0; i < slots.size(); ++i) {  // position order within the rank
            rank_bytes[static_cast<std::size_t>(owner[i])] += slots[i].bytes;
            slice_bytes[static_cast<std::size_t>(slice_owner(i, options, w))] += slots[i].bytes;
            if (owner[i] != rank) continue;
            plan.ids[k] = slots[i].id;
            plan.valid[k] = slots[i].position < num_samples;
            ++k;
        }
        report.add(rank_bytes);
        unbalanced.add(slice_bytes);
    }
    plan.worst_step_byte_ratio = report.worst;
    plan.mean_step_byte_ratio = report.mean();
    plan.unbalanced_worst_step_byte_ratio = unbalanced.worst;
    plan.unbalanced_mean_step_byte_ratio = unbalanced.mean();
}

}  // namespace mpistage::detail

namespace mpistage {

std::vector<std::int64_t> global_step_ids(std::uint64_t num_samples, int world_size,
                                          const PlanOptions& options, std::uint64_t epoch,
                                          const EpochStart& start, std::uint64_t step,
                                          const SampleBytesFn& sample_bytes) {
    if (options.sharding != Sharding::global) {
        throw ConfigError("plan: the ids of a whole step exist only with global sharding");
    }
    if (options.budget.active()) {
        throw ConfigError("plan: the ids of a whole step are for fixed batches, not a budget");
    }
    if (options.balance_steps && !sample_bytes) {
        throw ConfigError("plan: balance_steps needs the size of every sample");
    }
    const EpochTotals totals = plan_totals(num_samples, world_size, options, start);
    if (step >= totals.steps) {
        throw ConfigError("plan: step " + std::to_string(step) + " of a plan of " +
                          std::to_string(totals.steps) + " steps");
    }
    const std::uint64_t b = options.batch_size;
    const std::uint64_t width = static_cast<std::uint64_t>(world_size) * b;
    const detail::GlobalOrder order(num_samples, options, epoch,
                                    detail::order_world(start, world_size));
    std::vector<std::int64_t> ids(width);
    if (!options.balance_steps) {
        // Rank r's batch is slice r of the global batch (as plan_global without a balance).
        std::vector<std::uint64_t> filled(static_cast<std::size_t>(world_size), 0);
        for (std::uint64_t i = 0; i < width; ++i) {
            const auto q = static_cast<std::size_t>(
                detail::slice_owner(i, options, static_cast<std::uint64_t>(world_size)));
            ids[q * b + filled[q]++] = order.id_at(start.position + step * width + i);
        }
        return ids;
    }
    const auto slots = detail::global_batch(order, start.position, step, width, sample_bytes);
    const auto owner = detail::balance_global_batch(slots, world_size, b);
    std::vector<std::uint64_t> filled(static_cast<std::size_t>(world_size), 0);
    for (std::size_t i = 0; i < slots.size(); ++i) {  // position order within each rank
        const auto q = static_cast<std::size_t>(owner[i]);
        ids[q * b + filled[q]++] = slots[i].id;
    }
    return ids;
}

}  // namespace mpistage
