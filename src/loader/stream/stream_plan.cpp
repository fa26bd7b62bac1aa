// Pure decisions of the stream loader (see stream_plan.hpp).
#include "loader/stream/stream_plan.hpp"

#include <algorithm>
#include <numeric>

#include "mpistage/hash.hpp"

namespace mpistage::detail {

std::vector<int> assign_streams(const std::vector<double>& weights, int world_size) {
    std::vector<std::size_t> order(weights.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return weights[a] > weights[b]; });
    std::vector<double> load(static_cast<std::size_t>(world_size), 0.0);
    std::vector<int> owner(weights.size(), 0);
    for (std::size_t s : order) {
        const auto least = std::min_element(load.begin(), load.end()) - load.begin();
        owner[s] = static_cast<int>(least);
        load[static_cast<std::size_t>(least)] += weights[s];
    }
    return owner;
}

int chunk_owner(std::uint64_t stream, std::uint64_t position, std::uint64_t chunk_size,
                int world_size) {
    const auto w = static_cast<std::uint64_t>(world_size);
    return static_cast<int>((position / chunk_size + stream) % w);
}

PositionFilter::PositionFilter(std::uint64_t stream, std::uint64_t chunk_size, int rank,
                               int world_size, StreamPosition resumed, bool by_key)
    : stream_(stream),
      chunk_size_(chunk_size),
      rank_(rank),
      world_size_(world_size),
      resumed_(std::move(resumed)),
      by_key_(by_key) {}

bool PositionFilter::keeps(std::uint64_t p, std::uint64_t key) const {
    if (consumed(p)) return false;
    return !by_key_ || mix64(key) % static_cast<std::uint64_t>(world_size_) ==
                           static_cast<std::uint64_t>(rank_);
}

bool PositionFilter::consumed(std::uint64_t p) const {
    if (p >= resumed_.next) return false;
    const auto& pend = resumed_.pending;
    // First range whose end is past p.
    auto it = std::upper_bound(pend.begin(), pend.end(), p,
                               [](std::uint64_t v, const auto& r) { return v < r.second; });
    return it == pend.end() || p < it->first;
}

std::uint64_t PositionFilter::next_wanted(std::uint64_t p) const {
    for (;;) {
        const std::uint64_t start = p;
        if (chunk_size_ > 0 && chunk_owner(stream_, p, chunk_size_, world_size_) != rank_) {
            const std::uint64_t c = p / chunk_size_;
            const auto w = static_cast<std::uint64_t>(world_size_);
            const std::uint64_t delta =
                (static_cast<std::uint64_t>(rank_) + w - (c + stream_) % w) % w;
            p = (c + delta) * chunk_size_;
        }
        if (consumed(p)) {
            const auto& pend = resumed_.pending;
            auto it = std::upper_bound(pend.begin(), pend.end(), p,
                                       [](std::uint64_t v, const auto& r) { return v < r.first; });
            p = it == pend.end() ? resumed_.next : std::min(it->first, resumed_.next);
        }
        if (p == start) return p;
    }
}

BatchLimits batch_limits(const StreamConfig& o) {
    return BatchLimits{o.batch_size, o.batch_bytes, o.batch_tokens};
}

std::size_t bucket_of(const SampleCost& c, const StreamConfig& o) {
    const auto& b = o.length_buckets;
    const std::uint64_t len = o.batch_tokens > 0 ? c.tokens : c.size_bytes;
    return static_cast<std::size_t>(std::lower_bound(b.begin(), b.end(), len) - b.begin());
}

BatchChoice choose_batch(const std::vector<SampleCost>& queue, const StreamConfig& o) {
    const std::size_t nb = o.length_buckets.size() + 1;
    std::vector<BatchFitter> fit(nb, BatchFitter(batch_limits(o)));
    std::vector<std::vector<std::size_t>> members(nb);
    std::vector<std::size_t> first_seen;  // buckets in order of their oldest sample
    for (std::size_t i = 0; i < queue.size(); ++i) {
        const std::size_t b = bucket_of(queue[i], o);
        if (members[b].empty() && !fit[b].full()) first_seen.push_back(b);
        if (fit[b].add(queue[i])) members[b].push_back(i);
        if (nb == 1 && fit[0].full()) break;  // one bucket: nothing later joins the batch
    }
    BatchChoice c;
    if (first_seen.empty()) return c;
    std::size_t pick = first_seen.front();
    for (std::size_t b : first_seen) {
        if (fit[b].full()) {
            pick = b;
            break;
        }
    }
    c.take = std::move(members[pick]);
    c.full = fit[pick].full();
    c.oversize = fit[pick].oversize();
    if (o.batch_tokens > 0) {
        const std::uint64_t used = fit[pick].max_tokens() * fit[pick].count();
        c.budget_left = o.batch_tokens > used ? o.batch_tokens - used : 0;
    } else if (o.batch_bytes > 0) {
        const std::uint64_t used = fit[pick].size_bytes();
        c.budget_left = o.batch_bytes > used ? o.batch_bytes - used : 0;
    }
    return c;
}

std::uint64_t full_batches(std::vector<SampleCost> queue, const StreamConfig& o,
                           std::uint64_t max) {
    if (o.batch_bytes == 0 && o.batch_tokens == 0 && o.length_buckets.empty()) {
        // Count limit only: each batch is the next batch_size samples in order.
        return std::min<std::uint64_t>(max, queue.size() / o.batch_size);
    }
    std::uint64_t n = 0;
    for (; n < max; ++n) {
        const BatchChoice c = choose_batch(queue, o);
        if (!c.full) break;
        // Remove the taken samples, keeping the order of the rest (as the loader's queue).
        std::size_t k = 0, out = 0;
        for (std::size_t i = 0; i < queue.size(); ++i) {
            if (k < c.take.size() && c.take[k] == i) {
                ++k;
                continue;
            }
            queue[out++] = queue[i];
        }
        queue.resize(out);
    }
    return n;
}

std::vector<std::uint64_t> RankStep::pack() const {
    return {failed ? 1u : 0u,
            queued,
            exhausted ? 1u : 0u,
            take,
            full ? 1u : 0u,
            budget_left,
            cost_sum,
            read,
            ready,
            stop ? 1u : 0u};
}

std::vector<RankStep> RankStep::unpack(const std::vector<std::uint64_t>& all, int world_size) {
    std::vector<RankStep> out(static_cast<std::size_t>(world_size));
    for (std::size_t r = 0; r < out.size(); ++r) {
        const std::uint64_t* v = all.data() + r * kRankStepWords;
        out[r] = RankStep{v[0] != 0, v[1], v[2] != 0, v[3], v[4] != 0,
                          v[5],      v[6], v[7],      v[8], v[9] != 0};
    }
    return out;
}

std::vector<std::uint64_t> deficits(const std::vector<RankStep>& ranks, const StreamConfig& o) {
    std::uint64_t items = 0;
    std::uint64_t cost = 0;
    for (const auto& r : ranks) {
        items += r.queued;
        cost += r.cost_sum;
    }
    const bool budget = o.batch_bytes > 0 || o.batch_tokens > 0;
    const std::uint64_t mean = items > 0 ? std::max<std::uint64_t>(1, cost / items) : 1;
    std::vector<std::uint64_t> d(ranks.size(), 0);
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r].full) continue;
        const std::uint64_t room = o.batch_size - ranks[r].take;
        const std::uint64_t want = budget ? (ranks[r].budget_left + mean - 1) / mean : room;
        d[r] = std::max<std::uint64_t>(1, std::min(room, want));
    }
    return d;
}

std::vector<std::vector<std::uint64_t>> transfer_plan(const std::vector<std::uint64_t>& deficit,
                                                      const std::vector<std::uint64_t>& surplus) {
    const std::size_t w = deficit.size();
    std::vector<std::vector<std::uint64_t>> t(w, std::vector<std::uint64_t>(w, 0));
    std::vector<std::uint64_t> need = deficit;
    std::vector<std::uint64_t> have = surplus;
    std::size_t to = 0;
    for (std::size_t from = 0; from < w; ++from) {
        while (have[from] > 0) {
            while (to < w && need[to] == 0) ++to;
            if (to == w) return t;
            const std::uint64_t n = std::min(have[from], need[to]);
            t[from][to] += n;
            have[from] -= n;
            need[to] -= n;
        }
    }
    return t;
}

}  // namespace mpistage::detail
