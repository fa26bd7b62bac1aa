#pragma once
// Read-ahead of a rank's streams by I/O threads: each cursor has a bounded lane of items read
// ahead by one I/O thread (cursor i by thread i mod T), and the loader takes them in its own
// round-robin over the cursors, so the items, their order and the step at which a read error
// surfaces are the same as reading on the caller's thread. The reading cost (a database cursor,
// a decoder, the user's generator) is paid while the trainer computes. No MPI call is made here.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "loader/stream/stream_config.hpp"
#include "loader/stream/stream_item.hpp"

namespace mpistage::detail {

struct StreamCursor;

/// Local: reads the next item of cursor `c` that this rank keeps (skipping the positions its
/// filter does not want) into `out`, using `scratch`; false when the stream ended. @throws
/// what the reader throws, FormatError for an item that does not match `fields`.
bool read_cursor(StreamCursor& c, StreamSample& scratch, const std::vector<FieldInfo>& fields,
                 const StreamConfig& options, StreamItem& out);

/// The lanes and their I/O threads. Construction starts the threads (a thread that cannot be
/// started is not an error: the others read its lanes; none at all leaves `threads()` 0 and the
/// caller reads on its own thread); destruction stops and joins them (a thread inside a read
/// finishes that read first). The cursors must outlive it
/// and are read by its threads only while it exists. One consumer thread.
class StreamPrefetch {
public:
    /// `items` and `bytes`: the read-ahead of all lanes together (each lane holds at least one
    /// item); `threads` ≥ 1 (at most one per cursor are started).
    StreamPrefetch(std::vector<StreamCursor>& cursors, const std::vector<FieldInfo>& fields,
                   const StreamConfig& options, std::uint64_t items, std::uint64_t bytes,
                   std::size_t threads);
    ~StreamPrefetch();
    StreamPrefetch(const StreamPrefetch&) = delete;
    StreamPrefetch& operator=(const StreamPrefetch&) = delete;

    /// Consumer: the next item of cursor `i` into `out` (waits while its thread reads it); false
    /// once that stream ended. Rethrows the read error of that cursor after its items read
    /// before the error, and again on later calls.
    bool take(std::size_t i, StreamItem& out);
    /// I/O threads running.
    std::size_t threads() const noexcept { return threads_.size(); }
    /// Seconds the consumer waited in `take` for an item not yet read.
    double wait_seconds() const noexcept { return wait_seconds_; }

private:
    struct Lane {
        std::deque<StreamItem> items;
        std::uint64_t bytes = 0;
        bool ended = false;
        std::exception_ptr error;
    };
    void worker(std::size_t t);
    bool full(const Lane& l) const noexcept {
        return l.items.size() >= lane_items_ || (!l.items.empty() && l.bytes >= lane_bytes_);
    }

    std::vector<StreamCursor>& cursors_;
    const std::vector<FieldInfo>& fields_;
    const StreamConfig& options_;
    std::uint64_t lane_items_ = 1;
    std::uint64_t lane_bytes_ = 1;
    std::mutex m_;
    std::condition_variable produced_;  // a lane got an item, ended or failed
    std::condition_variable consumed_;  // a lane has room again, or stop
    std::vector<Lane> lanes_;           // guarded by m_
    /// Per lane, items the consumer took out of it in one hand-over (its thread only).
    std::vector<std::deque<StreamItem>> taken_;
    bool stop_ = false;        // guarded by m_
    std::size_t started_ = 0;  // guarded by m_: threads that run (0 until all started)
    std::vector<std::thread> threads_;
    double wait_seconds_ = 0;
};

}  // namespace mpistage::detail
