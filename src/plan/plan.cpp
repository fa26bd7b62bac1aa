#include "mpistage/plan.hpp"

#include <algorithm>

#include "mpistage/error.hpp"
#include "plan/budget_plan.hpp"
#include "plan/plan_detail.hpp"

namespace mpistage {

Permutation::Permutation(std::uint64_t n, std::uint64_t key) : n_(n), key_(mix64(key)) {
    unsigned bits = 0;
    while (bits < 64 && (std::uint64_t{1} << bits) < n) ++bits;
    if (bits % 2) ++bits;
    if (bits < 2) bits = 2;
    half_bits_ = bits / 2;
    half_mask_ = (std::uint64_t{1} << half_bits_) - 1;
    for (std::uint64_t round = 0; round < 4; ++round) round_keys_[round] = mix64(key_ + round);
}

std::uint64_t Permutation::operator()(std::uint64_t i) const {
    if (n_ <= 1) return i;
    std::uint64_t x = i;
    do {  // cycle-walk: re-encrypt until the value lands inside [0, n)
        std::uint64_t left = x >> half_bits_;
        std::uint64_t right = x & half_mask_;
        for (std::uint64_t round = 0; round < 4; ++round) {
            const std::uint64_t f = mix64(right ^ round_keys_[round]) & half_mask_;
            const std::uint64_t next = left ^ f;
            left = right;
            right = next;
        }
        x = (left << half_bits_) | right;
    } while (x >= n_);
    return x;
}

void PlanOptions::validate() const {
    if (batch_size == 0) throw ConfigError("plan: batch_size must be at least 1");
    if (sharding == Sharding::byte_range && shuffle == Shuffle::global) {
        throw ConfigError(
            "plan: shuffle 'global' needs sharding 'global' (byte_range shards are "
            "shuffled with 'local')");
    }
    if (sharding == Sharding::byte_range && shuffle == Shuffle::chunks) {
        throw ConfigError(
            "plan: shuffle 'chunks' needs sharding 'global' (its chunks are dealt "
            "to the ranks each epoch)");
    }
    if (shuffle == Shuffle::chunks && balance_steps) {
        throw ConfigError(
            "plan: balance_steps moves samples between ranks inside each global batch, away from "
            "the chunks a rank holds; it does not combine with shuffle 'chunks'");
    }
    if (shuffle != Shuffle::chunks && (chunk_samples != 0 || window_chunks != 0)) {
        throw ConfigError(
            "plan: chunk_samples and window_chunks are parameters of shuffle "
            "'chunks'; this shuffle is '" +
            to_string(shuffle) + "'");
    }
    if (sharding == Sharding::global && shuffle == Shuffle::local) {
        throw ConfigError(
            "plan: shuffle 'local' needs sharding 'byte_range' (global sharding is "
            "shuffled with 'global')");
    }
    if (balance_steps && sharding != Sharding::global) {
        throw ConfigError(
            "plan: balance_steps needs sharding 'global' (byte_range shards are "
            "balanced by bytes already)");
    }
    if (budget.active() && budget.max_batch_samples == 0) {
        throw ConfigError("plan: max_batch_samples (--max-batch-samples) must be ≥ 1");
    }
    if (budget.active() && balance_steps) {
        throw ConfigError(
            "plan: balance_steps balances fixed batches; it does not combine with "
            "a batch budget (batch_bytes/batch_tokens)");
    }
}

std::string to_string(Sharding s) {
    return s == Sharding::byte_range ? "byte_range" : "global";
}
std::string to_string(Shuffle s) {
    switch (s) {
        case Shuffle::none:
            return "none";
        case Shuffle::local:
            return "local";
        case Shuffle::global:
            return "global";
        case Shuffle::chunks:
            return "chunks";
    }
    return "unknown";
}
std::string to_string(Remainder r) {
    return r == Remainder::drop ? "drop" : (r == Remainder::pad ? "pad" : "mask");
}
Sharding parse_sharding(const std::string& s) {
    if (s == "byte_range" || s == "byte-range") return Sharding::byte_range;
    if (s == "global") return Sharding::global;
    throw ConfigError("unknown sharding '" + s + "' (expected byte_range or global)");
}
Shuffle parse_shuffle(const std::string& s) {
    if (s == "none") return Shuffle::none;
    if (s == "local") return Shuffle::local;
    if (s == "global") return Shuffle::global;
    if (s == "chunks") return Shuffle::chunks;
    throw ConfigError("unknown shuffle '" + s + "' (expected none, local, global or chunks)");
}
Remainder parse_remainder(const std::string& s) {
    if (s == "drop") return Remainder::drop;
    if (s == "pad") return Remainder::pad;
    if (s == "mask") return Remainder::mask;
    throw ConfigError("unknown remainder policy '" + s + "' (expected drop, pad or mask)");
}

namespace detail {

void check_world(std::uint64_t num_samples, int world_size) {
    if (world_size < 1) {
        throw ConfigError("plan: world size must be at least 1, got " + std::to_string(world_size));
    }
    if (num_samples == 0) throw ConfigError("plan: the dataset has no samples: nothing to shard");
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
    return a / b + (a % b != 0);
}

}  // namespace detail

using detail::ceil_div;

std::uint64_t epoch_permutation_key(const PlanOptions& o, std::uint64_t epoch, std::uint64_t salt) {
    return mix64(mix64(o.seed) ^ mix64(epoch + 0x51ed270b27a1f5a3ULL) ^
                 mix64(salt * 0x2545f491ULL + 7));
}

std::vector<std::uint64_t> balanced_shard_begins(std::uint64_t num_samples, int world_size) {
    if (world_size < 1) {
        throw ConfigError("plan: world size must be at least 1, got " + std::to_string(world_size));
    }
    const auto w = static_cast<std::uint64_t>(world_size);
    std::vector<std::uint64_t> begins(w + 1);
    for (std::uint64_t r = 0; r <= w; ++r)
        begins[r] = r * (num_samples / w) + std::min(r, num_samples % w);
    return begins;
}

EpochTotals plan_totals(std::uint64_t num_samples, int world_size, const PlanOptions& options) {
    return plan_totals(num_samples, world_size, options, EpochStart{});
}

EpochTotals plan_totals(std::uint64_t num_samples, int world_size, const PlanOptions& options,
                        const EpochStart& start) {
    options.validate();
    detail::check_world(num_samples, world_size);
    if (options.budget.active()) {
        throw ConfigError(
            "plan: the totals of budget batches depend on the sample costs; they "
            "come with the plan (plan_epoch, EpochPlan::totals)");
    }
    const auto w = static_cast<std::uint64_t>(world_size);
    const std::uint64_t b = options.batch_size;
    const bool drop = options.remainder == Remainder::drop;
    EpochTotals t;
    if (options.sharding == Sharding::byte_range) {
        const std::uint64_t n_min = num_samples / w;
        const std::uint64_t n_max = ceil_div(num_samples, w);
        const std::uint64_t steps = drop ? n_min / b : ceil_div(n_max, b);
        if (start.step > steps) {
            throw ConfigError("plan: resume at step " + std::to_string(start.step) +
                              " but the epoch has " + std::to_string(steps) +
                              " steps at W=" + std::to_string(w));
        }
        t.steps = steps - start.step;
        // Valid samples of the remaining steps: rank r holds n_r samples in its first slots.
        const auto begins = balanced_shard_begins(num_samples, world_size);
        const std::uint64_t done = start.step * b;
        const std::uint64_t end = steps * b;
        for (std::uint64_t r = 0; r < w; ++r) {
            const std::uint64_t n_r = begins[r + 1] - begins[r];
            const std::uint64_t hi = std::min(n_r, end);
            t.valid_samples += hi > done ? hi - done : 0;
        }
        t.dropped_samples = drop ? num_samples - std::min(num_samples, steps * b * w) : 0;
    } else {
        if (start.position > num_samples) {
            throw ConfigError("plan: resume at position " + std::to_string(start.position) +
                              " of an epoch of " + std::to_string(num_samples) + " samples");
        }
        const std::uint64_t left = num_samples - start.position;
        t.steps = drop ? left / (w * b) : ceil_div(left, w * b);
        t.valid_samples = drop ? t.steps * w * b : left;
        t.dropped_samples = left - t.valid_samples;
    }
    t.padding_slots = t.steps * b * w - t.valid_samples;
    return t;
}

EpochPlan plan_epoch(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch) {
    return plan_epoch(num_samples, world_size, rank, options, epoch, EpochStart{});
}

EpochPlan plan_epoch(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch, const EpochStart& start,
                     const SampleBytesFn& sample_bytes, const SampleTokensFn& sample_tokens) {
    EpochPlan plan = plan_epoch_on_demand(num_samples, world_size, rank, options, epoch, start,
                                          sample_bytes, sample_tokens);
    detail::materialize(plan);
    return plan;
}

std::int64_t EpochPlan::slot_id(std::uint64_t k) const {
    return rule ? rule->at(k).first : ids[k];
}

bool EpochPlan::slot_valid(std::uint64_t k) const {
    return rule ? rule->at(k).second : valid[k] != 0;
}

EpochPlan plan_epoch_on_demand(std::uint64_t num_samples, int world_size, int rank,
                               const PlanOptions& options, std::uint64_t epoch,
                               const EpochStart& start, const SampleBytesFn& sample_bytes,
                               const SampleTokensFn& sample_tokens) {
    options.validate();
    detail::check_world(num_samples, world_size);
    if (rank < 0 || rank >= world_size) {
        throw ConfigError("plan: rank " + std::to_string(rank) + " outside world of size " +
                          std::to_string(world_size));
    }
    EpochPlan plan;
    if (options.budget.active()) {
        if (!sample_bytes || (options.budget.batch_tokens > 0 && !sample_tokens)) {
            throw ConfigError(std::string("plan: a batch budget needs the ") +
                              (sample_bytes ? "tokens" : "size") + " of every sample");
        }
        plan.first_step = start.step;
        const detail::SampleCostFn cost = [&](std::uint64_t id) {
            return detail::SampleCost{sample_bytes(id), sample_tokens ? sample_tokens(id) : 0};
        };
        detail::plan_budget(num_samples, world_size, rank, options, epoch, start, cost, plan);
        return plan;
    }
    const EpochTotals totals = plan_totals(num_samples, world_size, options, start);
    if (options.balance_steps && !sample_bytes) {
        throw ConfigError("plan: balance_steps needs the size of every sample");
    }
    plan.totals = totals;
    plan.steps = totals.steps;
    plan.batch_size = options.batch_size;
    plan.first_step = start.step;
    if (options.sharding == Sharding::global) {
        detail::plan_global(num_samples, world_size, rank, options, epoch, start, sample_bytes,
                            plan);
    } else {
        detail::plan_byte_range(num_samples, world_size, rank, options, epoch, start.step, plan);
    }
    return plan;
}

namespace detail {

std::pair<std::int64_t, bool> SlotRule::at(std::uint64_t k) const {
    if (kind == Kind::global) {
        const std::uint64_t p =
            position + (k / batch_size) * width + rank_offset + (k % batch_size) * slot_stride;
        if (p >= num_samples && mask) return {kPaddingId, false};
        const std::uint64_t q = p < num_samples ? p : (p - num_samples) % num_samples;
        if (chunks) return {static_cast<std::int64_t>(chunks->id_at(q)), p < num_samples};
        return {static_cast<std::int64_t>(shuffle ? perm(q) : q), p < num_samples};
    }
    const std::uint64_t e = skip + k;  // the slot in the rank's whole epoch
    if (e < real) return {static_cast<std::int64_t>(shard_begin + (shuffle ? perm(e) : e)), true};
    // Padding slots of all ranks are numbered in rank order; pad slot q repeats sample q mod N
    // from the head of the dataset, so padding is spread over distinct samples.
    if (mask) return {kPaddingId, false};
    return {static_cast<std::int64_t>((pad_before + (e - real)) % num_samples), false};
}

void materialize(EpochPlan& plan) {
    if (!plan.rule) return;
    const std::uint64_t slots = plan.steps * plan.batch_size;
    plan.ids.resize(slots);
    plan.valid.resize(slots);
    for (std::uint64_t k = 0; k < slots; ++k) {
        const auto [id, valid] = plan.rule->at(k);
        plan.ids[k] = id;
        plan.valid[k] = valid ? 1 : 0;
    }
    plan.rule.reset();
}

void plan_byte_range(std::uint64_t num_samples, int world_size, int rank,
                     const PlanOptions& options, std::uint64_t epoch, std::uint64_t first_step,
                     EpochPlan& plan) {
    const auto r = static_cast<std::uint64_t>(rank);
    const std::uint64_t b = options.batch_size;
    // The whole epoch's slots of this rank, of which the first `first_step` batches are skipped.
    const std::uint64_t slots = (plan.steps + first_step) * b;
    const auto begins = balanced_shard_begins(num_samples, world_size);
    plan.shard_begin = begins[r];
    plan.shard_end = begins[r + 1];
    const std::uint64_t n_r = plan.shard_end - plan.shard_begin;
    auto rule = std::make_shared<SlotRule>();
    rule->kind = SlotRule::Kind::byte_range;
    rule->num_samples = num_samples;
    rule->batch_size = b;
    rule->shuffle = options.shuffle == Shuffle::local;
    rule->mask = options.remainder == Remainder::mask;
    rule->perm = Permutation(n_r, epoch_permutation_key(options, epoch, r + 1));
    rule->skip = first_step * b;
    rule->real = std::min(n_r, slots);
    rule->shard_begin = plan.shard_begin;
    for (std::uint64_t q = 0; q < r; ++q) {
        const std::uint64_t n_q = begins[q + 1] - begins[q];
        rule->pad_before += slots > n_q ? slots - n_q : 0;
    }
    plan.rule = std::move(rule);
}

}  // namespace detail

std::string plan_fingerprint(std::uint64_t num_samples, int world_size, const PlanOptions& o) {
    return "N=" + std::to_string(num_samples) + ";W=" + std::to_string(world_size) +
           ";B=" + std::to_string(o.batch_size) + ";seed=" + std::to_string(o.seed) +
           ";sharding=" + to_string(o.sharding) + ";shuffle=" + to_string(o.shuffle) +
           ";remainder=" + to_string(o.remainder) + (o.balance_steps ? ";balance_steps" : "") +
           (o.budget.active() ? ";budget:" + o.budget.describe() : std::string());
}

}  // namespace mpistage
