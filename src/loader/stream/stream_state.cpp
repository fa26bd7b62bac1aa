// Stream state for resume: per-stream positions with the pending (not yet yielded) ranges, kept
// on every rank from what each step's ranks announce (so `state()` is local; its JSON form is
// LoaderState's, state.cpp).
#include <algorithm>
#include <iterator>

#include "loader/stream/stream_engine.hpp"

namespace mpistage {

namespace {

constexpr std::uint64_t kPositionMask = (std::uint64_t{1} << 40) - 1;

/// Adds [b, e) to disjoint ranges `r` (begin → end), merging what it touches.
void add_range(std::map<std::uint64_t, std::uint64_t>& r, std::uint64_t b, std::uint64_t e) {
    auto it = r.upper_bound(b);
    if (it != r.begin()) {
        auto prev = std::prev(it);
        if (prev->second >= b) {
            b = prev->first;
            e = std::max(e, prev->second);
            it = r.erase(prev);
        }
    }
    while (it != r.end() && it->first <= e) {
        e = std::max(e, it->second);
        it = r.erase(it);
    }
    r.emplace(b, e);
}

/// (first id, count) runs of one step, rank after rank, sorted by id and merged where one ends
/// at the next one's start. Under `hash` each rank's ids of a step are scattered over a range
/// that the ranks fill together (about one run per id of a rank alone, a few runs merged):
/// merged, the bookkeeping of a step is a few range insertions instead of one per id (at 2
/// ranks and 10^6 rows, 2·10^6 map updates per rank, as long as the reading itself).
std::vector<std::uint64_t> coalesce_runs(std::vector<std::uint64_t> runs) {
    const std::size_t n = runs.size() / 2;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> r(n);
    bool sorted = true;
    for (std::size_t i = 0; i < n; ++i) {
        r[i] = {runs[2 * i], runs[2 * i + 1]};
        if (i > 0 && r[i].first < r[i - 1].first) sorted = false;
    }
    if (!sorted) std::sort(r.begin(), r.end());
    runs.clear();
    for (const auto& [first, count] : r) {
        // Ids carry the stream in their top bits: a run never reaches into another stream.
        if (!runs.empty() && runs[runs.size() - 2] + runs.back() == first &&
            (first >> 40) == (runs[runs.size() - 2] >> 40)) {
            runs.back() += count;
        } else {
            runs.push_back(first);
            runs.push_back(count);
        }
    }
    return runs;
}

}  // namespace

void detail::StreamEngine::reset_yielded() {
    yielded.assign(source.num_streams(), {});
    delivered_all = delivered_before;
    // The resumed state's consumed positions: [0, next) minus its pending ranges.
    for (std::size_t s = 0; s < resumed.streams.size() && s < yielded.size(); ++s) {
        const StreamPosition& p = resumed.streams[s];
        std::uint64_t at = 0;
        for (const auto& [b, e] : p.pending) {
            if (b > at) add_range(yielded[s], at, std::min(b, p.next));
            at = std::max(at, e);
        }
        if (p.next > at) add_range(yielded[s], at, p.next);
    }
}

std::vector<std::vector<std::uint64_t>> detail::StreamEngine::next_batch_ids(
    std::uint64_t batches) const {
    // The same choices as `make_batch(choose_batch(queue_costs()))`, step after step: without
    // buckets a batch is chosen from the first batch_size queued samples, with buckets from all.
    const bool buckets = !options.length_buckets.empty();
    std::size_t n = queue.size();
    if (!buckets) {
        n = static_cast<std::size_t>(std::min<std::uint64_t>(n, batches * options.batch_size));
    }
    std::vector<detail::SampleCost> costs;
    std::vector<std::uint64_t> ids;
    costs.reserve(n);
    ids.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        costs.push_back({queue[i].size_bytes, queue[i].tokens});
        ids.push_back(
            static_cast<std::uint64_t>(stream_item_id(queue[i].stream, queue[i].position)));
    }
    std::vector<std::vector<std::uint64_t>> out(static_cast<std::size_t>(batches));
    for (auto& batch : out) {
        const std::size_t view = buckets ? costs.size()
                                         : static_cast<std::size_t>(std::min<std::uint64_t>(
                                               costs.size(), options.batch_size));
        const detail::BatchChoice c = detail::choose_batch(
            std::vector<detail::SampleCost>(costs.begin(),
                                            costs.begin() + static_cast<std::ptrdiff_t>(view)),
            options);
        std::vector<bool> taken(costs.size(), false);
        for (auto i : c.take) {
            taken[i] = true;
            batch.push_back(ids[i]);
        }
        std::sort(batch.begin(), batch.end());
        std::size_t keep = 0;
        for (std::size_t i = 0; i < costs.size(); ++i) {
            if (taken[i]) continue;
            costs[keep] = costs[i];
            ids[keep] = ids[i];
            ++keep;
        }
        costs.resize(keep);
        ids.resize(keep);
    }
    return out;
}

void detail::StreamEngine::announce(std::uint64_t batches) {
    // This rank's message: per step, the number of runs, then (first id, count) per run.
    std::vector<std::uint64_t> msg;
    for (const auto& batch : next_batch_ids(batches)) {
        const std::size_t head = msg.size();
        msg.push_back(0);
        for (std::size_t i = 0; i < batch.size();) {
            std::size_t j = i + 1;
            while (j < batch.size() && batch[j] == batch[j - 1] + 1) ++j;
            msg.push_back(batch[i]);
            msg.push_back(j - i);
            ++msg[head];
            i = j;
        }
    }
    const std::vector<std::uint64_t> all = comm.allgatherv(msg);
    // Rank after rank, each with `batches` steps: regroup by step.
    std::vector<std::vector<std::uint64_t>> steps_ids(static_cast<std::size_t>(batches));
    std::size_t at = 0;
    for (int r = 0; r < comm.size(); ++r) {
        for (auto& step_ids : steps_ids) {
            if (at >= all.size()) throw MpiError("stream loader: truncated step announcement");
            const std::uint64_t runs = all[at++];
            if (all.size() - at < 2 * runs) {
                throw MpiError("stream loader: truncated step announcement");
            }
            step_ids.insert(step_ids.end(), all.begin() + static_cast<std::ptrdiff_t>(at),
                            all.begin() + static_cast<std::ptrdiff_t>(at + 2 * runs));
            at += 2 * runs;
        }
    }
    for (auto& s : steps_ids) announced.push_back(coalesce_runs(std::move(s)));
}

void detail::StreamEngine::record_step() {
    if (announced.empty()) return;  // unreachable: every yielded step was announced
    const std::vector<std::uint64_t> runs = std::move(announced.front());
    announced.pop_front();
    for (std::size_t i = 0; i + 1 < runs.size(); i += 2) {
        const std::uint64_t stream = runs[i] >> 40;
        const std::uint64_t first = runs[i] & kPositionMask;
        if (stream < yielded.size()) add_range(yielded[stream], first, first + runs[i + 1]);
        delivered_all += runs[i + 1];
    }
}

LoaderState detail::StreamEngine::state() const {
    // Local: every rank holds every rank's yielded positions (`yielded`), identical.
    LoaderState st;
    st.input = LoaderInput::stream;
    st.dataset_fingerprint = state_fingerprint();
    st.world_size = comm.size();
    if (finished) {  // the pass was consumed to its end: the next one, from its start
        st.epoch = epoch + 1;
        st.streams.assign(source.num_streams(), StreamPosition{});
        return st;
    }
    st.epoch = epoch;
    st.steps_consumed = steps;
    st.samples_consumed = delivered_all;
    for (const auto& ranges : yielded) {
        // Up to the end of the last yielded run; what is not yielded below it is pending.
        StreamPosition p;
        std::uint64_t at = 0;
        for (const auto& [b, e] : ranges) {
            if (b > at) p.pending.emplace_back(at, b);
            at = e;
        }
        p.next = at;
        st.streams.push_back(std::move(p));
    }
    return st;
}

}  // namespace mpistage
