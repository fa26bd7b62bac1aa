#include "pipeline/prefetch.hpp"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <system_error>

#include "comm/agree.hpp"
#include "pipeline/fill.hpp"

namespace mpistage::detail {

namespace {

std::atomic<std::size_t> g_max_started{SIZE_MAX};
std::atomic<std::uint64_t> g_refused{0};

}  // namespace

void limit_io_thread_starts(std::size_t max_started) noexcept {
    g_max_started.store(max_started);
}

std::uint64_t refused_io_thread_starts() noexcept {
    return g_refused.load();
}

Prefetcher::Prefetcher(std::shared_ptr<Ring> ring, const Source& source, const EpochPlan& plan,
                       std::uint64_t epoch, StepReader step_reader, const Source* fallback)
    : ring_(std::move(ring)),
      source_(source),
      fallback_(fallback),
      plan_(plan),
      epoch_(epoch),
      step_reader_(std::move(step_reader)) {}

std::size_t Prefetcher::start(std::size_t count) noexcept {
    if (step_reader_) return 0;  // the step reader reads inside take()
    try {
        threads_.reserve(count);
        while (threads_.size() < count) {
            if (threads_.size() >= g_max_started.load()) {
                g_refused.fetch_add(1);
                throw std::system_error(EAGAIN, std::generic_category(),
                                        "refused by limit_io_thread_starts (a test)");
            }
            threads_.emplace_back([this] { worker(); });
        }
    } catch (const std::exception& e) {
        // std::system_error (no thread: RLIMIT_NPROC) or std::bad_alloc: the threads that did
        // start read every step (with none, `take` reads on the caller's thread). The batches
        // are the same, only slower, so the rank goes on and says so once.
        static std::once_flag said;
        std::call_once(said, [&] {
            std::fprintf(stderr,
                         "mpistage: cannot start I/O thread %zu of %zu (%s): reading with %zu%s\n",
                         threads_.size() + 1, count, e.what(), threads_.size(),
                         threads_.empty() ? " (on the caller's thread)" : "");
        });
    }
    return threads_.size();
}

void Prefetcher::worker() {
    for (;;) {
        Slot* slot = nullptr;
        std::uint64_t step = 0;
        {
            std::unique_lock<std::mutex> lk(ring_->m);
            ring_->cv.wait(
                lk, [&] { return stop_ || next_issue_ >= plan_.steps || !ring_->free.empty(); });
            if (stop_ || next_issue_ >= plan_.steps) return;
            slot = ring_->free.front();
            ring_->free.pop_front();
            step = next_issue_++;
            ++in_flight_;
        }
        std::exception_ptr error;
        try {
            fill_slot(*slot, source_, plan_, step, fallback_);
        } catch (...) {
            error = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> lk(ring_->m);
            ready_[step] = {slot, error};
            --in_flight_;
        }
        ring_->cv.notify_all();
    }
}

void Prefetcher::shutdown() noexcept {
    {
        std::lock_guard<std::mutex> lk(ring_->m);
        stop_ = true;
    }
    ring_->cv.notify_all();
    for (auto& t : threads_) {
        if (t.joinable()) t.join();
    }
    threads_.clear();
    std::lock_guard<std::mutex> lk(ring_->m);
    for (auto& entry : ready_) ring_->free.push_back(entry.second.first);
    ready_.clear();
}

std::string Prefetcher::slots_held_message(std::uint64_t step) const {
    return "loader: all " + std::to_string(ring_->slots.size()) +
           " prefetch slots are held by the caller (batches or tensors still alive), so "
           "batch " +
           std::to_string(step) + " of epoch " + std::to_string(epoch_) +
           " cannot be read; release earlier batches or raise the prefetch depth";
}

Slot* Prefetcher::take_inline(std::uint64_t step, LocalStatus& status) {
    Slot* slot = nullptr;
    status = capture([&] {
        slot = ring_->try_take();
        if (!slot) throw ConfigError(slots_held_message(step));
    });
    if (!slot) return nullptr;
    status = capture([&] { fill_slot(*slot, source_, plan_, step, fallback_); });
    return slot;
}

Slot* Prefetcher::take_stepped(std::uint64_t step, LocalStatus& status) {
    Slot* slot = nullptr;
    LocalStatus before = capture([&] {
        slot = ring_->try_take();
        if (!slot) throw ConfigError(slots_held_message(step));
    });
    status = step_reader_(slot, step, std::move(before));
    return slot;
}

Slot* Prefetcher::take(std::uint64_t step, LocalStatus& status) {
    if (step_reader_) return take_stepped(step, status);
    if (threads_.empty()) return take_inline(step, status);
    std::unique_lock<std::mutex> lk(ring_->m);
    bool stuck = false;
    try {
        // Bounded while slots are lent to copies (Ring::wait_while_lent): a failed device
        // never returns them.
        ring_->wait_while_lent(lk, [&] {
            if (ready_.count(step)) return true;
            stuck = ring_->free.empty() && ring_->copying == 0 && in_flight_ == 0 &&
                    next_issue_ <= step;
            return stuck;
        });
    } catch (...) {
        status = LocalStatus::from_current_exception();
        return nullptr;
    }
    if (!ready_.count(step)) {
        lk.unlock();
        status = capture([&] { throw ConfigError(slots_held_message(step)); });
        return nullptr;
    }
    auto entry = ready_[step];
    ready_.erase(step);
    if (entry.second) status = LocalStatus::from_exception(entry.second);
    return entry.first;
}

Slot* Prefetcher::take_if_ready(std::uint64_t step, LocalStatus& status) {
    if (step_reader_) return nullptr;  // collective steps are read by take() only, in order
    if (threads_.empty()) {
        Slot* slot = ring_->take_if_free();
        if (slot) status = capture([&] { fill_slot(*slot, source_, plan_, step, fallback_); });
        return slot;
    }
    std::lock_guard<std::mutex> lk(ring_->m);
    const auto it = ready_.find(step);
    if (it == ready_.end()) return nullptr;
    const auto entry = it->second;
    ready_.erase(it);
    if (entry.second) status = LocalStatus::from_exception(entry.second);
    return entry.first;
}

}  // namespace mpistage::detail
