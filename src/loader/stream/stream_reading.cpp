// The reading side of the stream loader: which streams this rank opens, which positions it
// keeps, and filling the queue (or the per-owner messages of `hash`) before each step.
#include <algorithm>

#include "loader/stream/stream_engine.hpp"
#include "mpistage/hash.hpp"

namespace mpistage {

void detail::StreamEngine::open_cursors() {
    const std::size_t n = source.num_streams();
    std::vector<int> owner;
    if (!detail::walks_every_stream(options)) {
        std::vector<double> w(n);
        for (std::size_t s = 0; s < n; ++s) w[s] = source.weight(s);
        owner = detail::assign_streams(w, comm.size());
    }
    for (std::size_t s = 0; s < n; ++s) {
        if (!owner.empty() && owner[s] != comm.rank()) continue;
        detail::StreamCursor c;
        c.stream = s;
        // Chunks of positions (`chunk`, `hash` reading chunks), or every position with the
        // owner test on each item's key (`hash` reading keys), or every position.
        const bool by_key =
            options.sharding == StreamSharding::hash && options.hash_reading == HashReading::keys;
        const std::uint64_t k =
            detail::walks_every_stream(options) && !by_key ? options.chunk_size : 0;
        c.filter = detail::PositionFilter(
            s, k, comm.rank(), comm.size(),
            resumed.streams.empty() ? StreamPosition{} : resumed.streams[s], by_key);
        c.reader = source.open(s);
        cursors.push_back(std::move(c));
    }
    scratch.fields.assign(source.fields().size(), {});
}

void detail::StreamEngine::start_prefetch() {
    stats.stream.io_threads = 0;
    if (options.io_threads == 0 || cursors.empty()) return;
    prefetch = std::make_unique<detail::StreamPrefetch>(cursors, source.fields(), options,
                                                        options.prefetch * options.batch_size,
                                                        options.window_bytes, options.io_threads);
    stats.stream.io_threads = prefetch->threads();
    if (stats.stream.io_threads == 0) prefetch.reset();  // no thread started: this thread reads
}

bool detail::StreamEngine::exhausted() const {
    for (const auto& c : cursors) {
        if (!c.ended) return false;
    }
    return true;
}

bool detail::StreamEngine::read_one(detail::StreamItem& out) {
    if (read_failure) throw_error(read_failure->kind, read_failure->message);
    // Round-robin; a live cursor lies within cursors.size() - 1 ended ones in cyclic order, so
    // `ended_seen` reaching the count means all ended (O(1) per item with many live cursors,
    // where testing `exhausted()` per item cost one pass over all of them).
    for (std::size_t ended_seen = 0; ended_seen < cursors.size();) {
        const std::size_t idx = next_cursor;
        auto& c = cursors[idx];
        next_cursor = (next_cursor + 1) % cursors.size();
        if (c.ended) {
            ++ended_seen;
            continue;
        }
        bool got = false;
        if (prefetch) {
            const double waited = prefetch->wait_seconds();
            got = prefetch->take(idx, out);
            stats.wait_io_time += std::chrono::duration<double>(prefetch->wait_seconds() - waited);
        } else {
            got = detail::read_cursor(c, scratch, source.fields(), options, out);
        }
        if (!got) {
            c.ended = true;
            ++ended_seen;
            continue;
        }
        ++stats.stream.items_read;
        return true;
    }
    return false;
}

void detail::StreamEngine::fill(std::uint64_t extra, std::vector<std::string>& outgoing,
                                bool ahead) {
    if (detail::forwards_items(options)) {
        const bool short_now = !detail::choose_batch(queue_costs(), options).full;
        // What this step needs: a batch's worth when the own queue is short, plus `extra`.
        std::uint64_t need = (short_now ? options.batch_size : 0) + extra;
        // Reading ahead for a window: on average as many rows come back from the other ranks
        // as leave, so reading until the own queue would hold `window_steps` batches routes a
        // window's rows in one exchange instead of one exchange per step.
        std::uint64_t ahead_goal = 0;
        if (ahead) {
            const std::uint64_t want = options.window_steps * options.batch_size;
            ahead_goal = want > queue.size() ? want - queue.size() : 0;
        }
        const std::uint64_t goal = std::max(need, ahead_goal);
        const auto w = static_cast<std::uint64_t>(comm.size());
        std::uint64_t read = 0, read_bytes = 0;
        detail::StreamItem item;
        try {
            while (read < goal && (read < need || read_bytes < options.window_bytes) &&
                   read_one(item)) {
                ++read;
                read_bytes += item.size_bytes;
                const auto owner = static_cast<std::size_t>(mix64(item.key) % w);
                if (owner == static_cast<std::size_t>(comm.rank())) {
                    queue.push_back(std::move(item));
                } else {
                    detail::encode_item(item, outgoing[owner]);
                    ++stats.stream.items_sent;
                }
            }
        } catch (...) {
            // A row read ahead of what this step needs: the error waits for the next read, as
            // with the other shardings (it is thrown at a later agreement on every rank).
            if (read < need) throw;
            if (!read_failure) read_failure = LocalStatus::from_current_exception();
        }
        return;
    }
    // Per-bucket fitters over the queue, extended as items arrive: O(1) per item.
    const std::size_t nb = options.length_buckets.size() + 1;
    std::vector<detail::BatchFitter> fit(nb, detail::BatchFitter(detail::batch_limits(options)));
    auto add = [&](const detail::StreamItem& it) {
        const detail::SampleCost c{it.size_bytes, it.tokens};
        fit[detail::bucket_of(c, options)].add(c);
    };
    std::uint64_t queued_bytes = 0;
    for (const auto& it : queue) {
        add(it);
        queued_bytes += it.size_bytes;
    }
    // Enough once a bucket can fill a batch and `extra` items remain beyond the largest full
    // bucket's batch (the batch `choose_batch` takes is never larger).
    auto needed = [&] {
        std::uint64_t largest = 0;
        bool any = false;
        for (const auto& f : fit) {
            if (!f.full()) continue;
            any = true;
            largest = std::max(largest, f.count());
        }
        return any && queue.size() >= largest + extra;
    };
    // Reading ahead for a window: on to `window_steps` batches of `batch_size` items (with
    // budgets or buckets the batches may be smaller; the agreement counts the full ones), or
    // `window_bytes`, whichever comes first.
    const std::uint64_t ahead_items = ahead ? options.window_steps * options.batch_size : 0;
    auto enough = [&] {
        if (!needed()) return false;
        return queue.size() >= ahead_items || queued_bytes >= options.window_bytes;
    };
    detail::StreamItem item;
    try {
        while (!enough() && read_one(item)) {
            add(item);
            queued_bytes += item.size_bytes;
            queue.push_back(std::move(item));
        }
    } catch (...) {
        // A read this step does not need yet (a full batch is queued): the error waits for the
        // step that needs the row, as it would have been found there without reading ahead.
        if (!ahead || !needed()) throw;
        if (!read_failure) read_failure = LocalStatus::from_current_exception();
    }
}

std::vector<detail::SampleCost> detail::StreamEngine::queue_costs(std::uint64_t batches) const {
    // Without buckets a batch is a prefix of the queue of at most batch_size samples, so the
    // choice (and whether it is full) depends on the first batch_size samples only: a step
    // costs O(batch), not O(queue), however far the window read ahead.
    std::size_t n = queue.size();
    if (options.length_buckets.empty()) {
        n = static_cast<std::size_t>(std::min<std::uint64_t>(n, batches * options.batch_size));
    }
    std::vector<detail::SampleCost> costs;
    costs.reserve(n);
    for (std::size_t i = 0; i < n; ++i) costs.push_back({queue[i].size_bytes, queue[i].tokens});
    return costs;
}

}  // namespace mpistage
