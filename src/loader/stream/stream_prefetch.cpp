// Read-ahead of a rank's streams by I/O threads (see stream_prefetch.hpp).
#include "loader/stream/stream_prefetch.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <system_error>

#include "loader/stream/stream_engine.hpp"

namespace mpistage::detail {

bool read_cursor(StreamCursor& c, StreamSample& scratch, const std::vector<FieldInfo>& fields,
                 const StreamConfig& options, StreamItem& out) {
    const std::uint64_t want = c.filter.next_wanted(c.position);
    if (want > c.position) {
        c.position += c.reader->skip(want - c.position);
        if (c.position < want) return false;
    }
    if (c.filter.by_key()) {
        // Every position is stepped; the reader reads the key of each and the whole item of
        // the first this rank keeps (positions counted here, one per `keep` call).
        std::uint64_t at = c.position;
        const bool got = c.reader->next_kept(
            scratch, [&](std::uint64_t key) { return c.filter.keeps(at++, key); });
        c.position = at;
        if (!got) return false;
        out = make_item(std::move(scratch), fields, c.stream, at - 1, options);
        return true;
    }
    if (!c.reader->next(scratch)) return false;
    out = make_item(std::move(scratch), fields, c.stream, c.position, options);
    ++c.position;
    return true;
}

StreamPrefetch::StreamPrefetch(std::vector<StreamCursor>& cursors,
                               const std::vector<FieldInfo>& fields, const StreamConfig& options,
                               std::uint64_t items, std::uint64_t bytes, std::size_t threads)
    : cursors_(cursors),
      fields_(fields),
      options_(options),
      lanes_(cursors.size()),
      taken_(cursors.size()) {
    const std::uint64_t n = std::max<std::uint64_t>(1, cursors.size());
    lane_items_ = std::max<std::uint64_t>(1, items / n);
    lane_bytes_ = std::max<std::uint64_t>(1, bytes / n);
    const std::size_t count = std::min(threads, cursors.size());
    for (std::size_t t = 0; t < count; ++t) {
        try {
            threads_.emplace_back([this, t] { worker(t); });
        } catch (const std::system_error& e) {
            // The cursors of a thread that cannot start are read by the others' (below):
            // `worker` takes lanes modulo the threads that run, so none is left unread.
            std::fprintf(stderr, "mpistage: could not start a stream I/O thread (%s)\n", e.what());
            break;
        }
    }
    {
        std::lock_guard<std::mutex> lock(m_);
        started_ = threads_.size();
    }
    consumed_.notify_all();
}

StreamPrefetch::~StreamPrefetch() {
    {
        std::lock_guard<std::mutex> lock(m_);
        stop_ = true;
    }
    consumed_.notify_all();
    for (auto& t : threads_) t.join();
}

void StreamPrefetch::worker(std::size_t t) {
    std::unique_lock<std::mutex> lock(m_);
    // Wait until every thread that will run is known, so the lanes are split among them.
    consumed_.wait(lock, [&] { return stop_ || started_ > 0; });
    const std::size_t step = started_;
    std::vector<std::size_t> mine;
    for (std::size_t i = t; i < lanes_.size(); i += step) mine.push_back(i);
    StreamSample scratch;
    scratch.fields.assign(fields_.size(), {});
    std::size_t next = 0;
    while (!stop_) {
        // The next lane of this thread (round-robin) that is open and has room.
        std::size_t lane = mine.size();
        bool open = false;
        for (std::size_t k = 0; k < mine.size(); ++k) {
            const std::size_t j = mine[(next + k) % mine.size()];
            const Lane& l = lanes_[j];
            if (l.ended || l.error) continue;
            open = true;
            if (!full(l)) {
                lane = (next + k) % mine.size();
                break;
            }
        }
        if (!open) return;  // every stream of this thread ended or failed
        if (lane == mine.size()) {
            consumed_.wait(lock);
            continue;
        }
        next = (lane + 1) % mine.size();
        const std::size_t i = mine[lane];
        // Read a run of items outside the lock and publish them at once: one lock and one
        // wake-up per run, not per item (for cheap rows the hand-over cost more than the read).
        const Lane& room_of = lanes_[i];
        const std::uint64_t room =
            lane_items_ > room_of.items.size() ? lane_items_ - room_of.items.size() : 1;
        const std::uint64_t run = std::max<std::uint64_t>(1, std::min<std::uint64_t>(room, 64));
        std::uint64_t room_bytes = lane_bytes_ > room_of.bytes ? lane_bytes_ - room_of.bytes : 1;
        lock.unlock();
        std::deque<StreamItem> got_items;
        std::uint64_t got_bytes = 0;
        bool ended = false;
        std::exception_ptr error;
        try {
            while (got_items.size() < run && got_bytes < room_bytes) {
                StreamItem item;
                if (!read_cursor(cursors_[i], scratch, fields_, options_, item)) {
                    ended = true;
                    break;
                }
                got_bytes += item.size_bytes;
                got_items.push_back(std::move(item));
            }
        } catch (...) {
            error = std::current_exception();  // after the items read before it
        }
        lock.lock();
        Lane& l = lanes_[i];
        l.bytes += got_bytes;
        for (auto& it : got_items) l.items.push_back(std::move(it));
        if (error) l.error = error;
        if (ended) l.ended = true;
        produced_.notify_all();
    }
}

bool StreamPrefetch::take(std::size_t i, StreamItem& out) {
    std::deque<StreamItem>& mine = taken_[i];  // the consumer's own: no lock
    if (mine.empty()) {
        std::unique_lock<std::mutex> lock(m_);
        Lane& l = lanes_[i];
        if (l.items.empty() && !l.ended && !l.error) {
            const auto t0 = std::chrono::steady_clock::now();
            produced_.wait(lock, [&] { return !l.items.empty() || l.ended || l.error; });
            wait_seconds_ +=
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        if (l.items.empty()) {
            if (l.error) std::rethrow_exception(l.error);
            return false;
        }
        // Everything the lane holds at once; its thread refills the lane meanwhile.
        mine.swap(l.items);
        l.bytes = 0;
        lock.unlock();
        consumed_.notify_all();
    }
    out = std::move(mine.front());
    mine.pop_front();
    return true;
}

}  // namespace mpistage::detail
