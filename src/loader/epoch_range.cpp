// One epoch seen by the consumer: ordered batches from the prefetcher, agreed in windows whose
// requests complete steps later (loader/window_agreement.hpp).
#include <stdexcept>

#include "comm/agree.hpp"
#include "loader/batch_builder.hpp"
#include "loader/device_delivery.hpp"
#include "loader/loader_impl.hpp"

namespace mpistage {

using Clock = std::chrono::steady_clock;

EpochRange::EpochRange(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EpochRange::EpochRange(EpochRange&&) noexcept = default;
EpochRange& EpochRange::operator=(EpochRange&& o) noexcept {
    if (this != &o) {
        if (impl_) impl_->shutdown();
        impl_ = std::move(o.impl_);
    }
    return *this;
}
EpochRange::~EpochRange() {
    if (impl_) impl_->shutdown();
}

std::uint64_t EpochRange::steps() const noexcept {
    return impl_->limit;
}
void EpochRange::request_stop() noexcept {
    impl_->stop_request.store(true, std::memory_order_relaxed);
}
bool EpochRange::stopped() const noexcept {
    return impl_->stopped;
}
const EpochPlan& EpochRange::plan() const noexcept {
    return impl_->plan;
}
const EpochTotals& EpochRange::totals() const noexcept {
    return impl_->totals;
}
std::uint64_t EpochRange::steps_done() const noexcept {
    return impl_->next_consume;
}
bool EpochRange::last_oversize() const noexcept {
    return impl_->last_oversize;
}

detail::SyncTag EpochRange::Impl::window_tag(detail::SyncKind kind, std::uint64_t s) const {
    detail::SyncTag t;
    t.kind = kind;
    t.epoch = epoch;
    t.step = plan.first_step + s;
    t.steps = plan.first_step + limit;
    return t;
}

std::uint64_t EpochRange::Impl::fill_window() {
    Loader::Impl& l = *loader;
    if (taken.empty()) {
        LocalStatus status;
        detail::Slot* slot = prefetch->take(next_consume, status);
        taken.emplace_back(slot, std::move(status));
    }
    // Later steps already read join without waiting; a failed read ends the run of good ones.
    // On a device, slots return as soon as their copy completed: the run then stops at
    // `prefetch` batches ahead, which bounds the device memory held by copies in flight.
    const std::size_t ahead = l.stager ? prefetch->ring()->slots.size() : limit;
    while (!taken.back().second.failed && next_consume + taken.size() < limit &&
           taken.size() < ahead) {
        LocalStatus status;
        detail::Slot* slot = prefetch->take_if_ready(next_consume + taken.size(), status);
        if (!slot) break;
        taken.emplace_back(slot, std::move(status));
    }
    std::size_t good = 0;
    while (good < taken.size() && !taken[good].second.failed) ++good;
    if (l.stager) good = stage_window(good);
    return next_consume + good;
}

void EpochRange::Impl::agree_step() {
    Loader::Impl& l = *loader;
    const std::uint64_t s = next_consume;
    const auto stop_asked = [&] {
        return stop_request.load(std::memory_order_relaxed) || mpistage::stop_requested();
    };
    if (taken.empty() && prefetch->collective_steps()) {
        // The step's exchange is a collective of its own: the ranks first agree that they all
        // are at this step (and whether to stop), so a rank in another call is never matched
        // with the exchange. (Steps read collectively run with lag 0: nothing is in flight.)
        l.comm.set_context({"loader: agree before exchange", static_cast<std::int64_t>(epoch),
                            static_cast<std::int64_t>(plan.first_step + s), "", -1});
        if (l.sync(window_tag(detail::SyncKind::exchange, s), {}, 0, stop_asked()).any_flag) {
            stopped = true;
            return;
        }
    }
    const std::uint64_t ready_until = fill_window();
    if (l.windows.promise && taken.front().second.failed) {
        agree_failed_read(LocalStatus(taken.front().second));
    }
    detail::WindowReport report;
    // Promised reads: every step of the epoch is reported ready (a failure is agreed later).
    report.ready_until = l.windows.promise ? limit : ready_until;
    report.failed = !l.windows.promise && ready_until < s + taken.size();
    report.stop = stop_asked();
    report.step_ns = step_ns();
    if (!window_protocol(s, report, taken.front().second)) stopped = true;
}

detail::WindowReport EpochRange::Impl::end_report() const {
    detail::WindowReport end;
    end.ready_until = limit;
    end.stop = stop_request.load(std::memory_order_relaxed) || mpistage::stop_requested();
    return end;
}

std::uint64_t EpochRange::Impl::step_ns() const {
    if (next_consume == 0) return 0;
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - started).count();
    return ns > 0 ? static_cast<std::uint64_t>(ns) / next_consume : 0;
}

bool EpochRange::Impl::window_protocol(std::uint64_t s, const detail::WindowReport& report,
                                       const LocalStatus& status) {
    Loader::Impl& l = *loader;
    detail::WindowState& w = l.windows;
    const detail::SyncTag tag = window_tag(detail::SyncKind::window, s);
    l.comm.set_context({"loader: agree on batch", static_cast<std::int64_t>(epoch),
                        static_cast<std::int64_t>(plan.first_step + s), "", -1});
    // Every decision below depends on the step and on completed requests only, so every rank
    // starts the same requests at the same steps and ends, throws or stops at the same step.
    if (s >= w.next_start) l.start_window(tag, s, report, limit, true);
    l.poll_windows(tag);
    // A request due at this step (started `lag` steps ago) must be complete now: a rank is
    // never more than `lag` steps ahead of the slowest one, and a stop it carries takes effect
    // at its due step.
    while (!w.pending.empty() && w.pending.front().step + w.pending.front().lag <= s) {
        l.wait_window(tag);
    }
    const auto decided = [&] { return w.credit > s || w.error_due(s); };
    while (!decided() && !w.pending.empty()) l.wait_window(tag);
    if (!decided()) {  // no request reached this step: one more, started here by every rank
        l.start_window(tag, s, report, limit, false);
        l.finish_windows(tag);
    }
    if (w.error_due(s)) {  // every rank is at this step: complete what is in flight, throw
        l.finish_windows(tag);
        throw_agreed_error(l.comm, status, w.error_rank);
    }
    if (w.stop_at <= s) {  // the agreed stop: no batch from here on any rank
        finish_all(s, report, status);
        stopped = true;
        return false;
    }
    if (!l.digest_covers(s + 1)) {
        // The consumed-id digest's blocking allreduce only once every rank is known to be
        // here: a request started at this step, completed with matching tags.
        if (w.last_start != s) l.start_window(tag, s, report, limit, false);
        finish_all(s, report, status);
        l.cover_digest(plan, s + 1);
    }
    return true;
}

void EpochRange::Impl::finish_all(std::uint64_t s, const detail::WindowReport& report,
                                  const LocalStatus& status) {
    Loader::Impl& l = *loader;
    detail::WindowState& w = l.windows;
    const detail::SyncTag tag = window_tag(detail::SyncKind::window, s);
    if (w.promise && w.last_start != s) l.start_window(tag, s, report, limit, false);
    l.finish_windows(tag);
    if (w.promise && w.error_step != detail::kNoStep) {
        throw_agreed_error(l.comm, status, w.error_rank);
    }
}

void EpochRange::Impl::agree_failed_read(const LocalStatus& status) {
    detail::WindowReport report;
    report.ready_until = next_consume;
    report.failed = true;
    report.step_ns = step_ns();
    // The peers run on to the step where the failure is due; so does this rank, in the
    // protocol only, its position with them (every rank leaves the epoch at the same step;
    // the batches it did not yield count as consumed). A stop agreed on the way throws the
    // failure instead (`finish_all`).
    Loader::Impl& l = *loader;
    // Known to `resolve_mismatch` while the protocol runs on (ranks found in different calls
    // then report this failure); cleared however this call ends.
    l.failed_read = status;
    struct Clear {
        LocalStatus& s;
        ~Clear() { s = LocalStatus(); }
    } clear{l.failed_read};
    for (std::uint64_t t = next_consume; t < limit; ++t) {
        next_consume = t;
        l.progress.consumed = t;
        (void)window_protocol(t, report, status);
    }
    next_consume = limit;
    l.progress.consumed = limit;
    finish_range_windows(report, status);
    throw std::logic_error("loader: internal error: a failed read of step " +
                           std::to_string(next_consume) + " was not agreed");
}

void EpochRange::Impl::finish_range_windows(const detail::WindowReport& report,
                                            const LocalStatus& status) {
    Loader::Impl& l = *loader;
    l.comm.set_context({"loader: agree on batch", static_cast<std::int64_t>(epoch),
                        static_cast<std::int64_t>(plan.first_step + limit), "", -1});
    finish_all(limit, report, status);
    // A stop that every rank now knows but that was not due before the end (with promised
    // reads a request's lag may reach past it) still tells every rank the range stopped.
    if (l.windows.stop_at != detail::kNoStep) stopped = true;
}

std::size_t EpochRange::Impl::stage_window(std::size_t good) {
    Loader::Impl& l = *loader;
    // The copies start now, ahead of the consumer; the slot goes to the stager with them.
    for (std::size_t i = staged.size(); i < good; ++i) {
        detail::Slot* slot = taken[i].first;
        std::shared_ptr<detail::Ring> ring = prefetch->ring();
        ring->lend_to_copy();
        // Released by the copy stream's host function, where no CUDA call may run: the ring
        // (pinned) is dropped later on a consumer thread, in case this was its last owner
        // (the loader reallocated it meanwhile; issue 39, bug 5).
        std::shared_ptr<void> lease(slot, [ring](void* s) mutable {
            ring->release_copied(static_cast<detail::Slot*>(s));
            detail::release_outside_host_function(std::move(ring));
        });
        detail::release_deferred();
        Staged st;
        st.step = slot->step;
        st.bytes = slot->bytes;
        st.num_valid = slot->num_valid;
        st.size = slot->size;
        taken[i].first = nullptr;  // owned by `lease` now
        try {
            st.shape = detail::submit_batch(
                *l.stager,
                detail::batch_from_slot(l.source.fields(), *slot, epoch,
                                        plan.first_step + slot->step, std::move(lease)),
                l.device.pinned);
        } catch (...) {
            taken[i].second = LocalStatus::from_current_exception();
            return i;  // agreed at its own step, as a failed read
        }
        staged.push_back(std::move(st));
    }
    return good;
}

bool EpochRange::next(HostBatch& out) {
    Impl& d = *impl_;
    if (d.of_stream) return d.next_stream(out);
    // Release the caller's previous batch first: `out` is being replaced, so its slot must not
    // count as held (otherwise `while (range.next(b))` and the range-for iterator fail at
    // step 1 with prefetch = 1). Copies the caller kept elsewhere still hold their slots.
    out = HostBatch();
    if (!d.loader) {
        if (d.finished || d.stopped) return false;
        throw ConfigError("loader: epoch " + std::to_string(d.epoch) +
                          ": the loader was closed or destroyed before this epoch's range "
                          "(a range must not outlive its loader)");
    }
    Loader::Impl& l = *d.loader;
    const auto t0 = Clock::now();
    const auto end_range = [&] {  // the end's agreement and drain count as waiting too
        if (!d.finished) {
            d.finished = true;
            if (d.next_consume > 0) l.stats.epoch_time += Clock::now() - d.started;
            d.shutdown();
            // Account every copy of the epoch (waits for the last ones); free the device
            // blocks the trainer held beyond the window.
            if (l.stager) detail::settle_epoch(*l.stager, l.stats.staging);
        }
        l.stats.wait_time += Clock::now() - t0;
        return false;
    };
    if (d.stopped) return end_range();
    const auto peers_before = l.comm.collective_wait();
    try {
        if (d.next_consume >= d.limit) {
            // The requests still in flight were started by every rank: complete them here, so
            // the epoch leaves nothing behind (and a rank that left early is found). Only once:
            // after the end the loader's windows may belong to a later epoch.
            if (!d.finished) d.finish_range_windows(d.end_report(), LocalStatus{});
        } else {
            if (d.next_consume == 0) d.started = t0;
            if (l.stager) {
                try {  // before any CUDA call: a capture is refused, agreed at this step
                    detail::refuse_capture(*l.stager);
                } catch (const Error&) {
                    d.agree_failed_read(LocalStatus::from_current_exception());
                }
            }
            d.agree_step();
        }
    } catch (...) {
        d.shutdown();
        d.next_consume = d.plan.steps;
        d.finished = true;
        throw;
    }
    const auto peers = l.comm.collective_wait() - peers_before;
    l.stats.wait_peers_time += peers;
    if (d.next_consume >= d.limit || d.stopped) return end_range();
    l.stats.wait_io_time += (Clock::now() - t0) - peers;
    const auto account = [&](std::size_t num_valid, std::size_t size, std::uint64_t step,
                             std::uint64_t bytes) {
        l.stats.wait_time += Clock::now() - t0;
        l.stats.batches += 1;
        l.stats.valid_samples += num_valid;
        l.stats.padding_slots += size - num_valid;
        d.last_oversize = d.plan.batch_oversize(step);
        l.stats.oversize_batches += d.last_oversize ? 1 : 0;
        l.stats.bytes_read += bytes;
        ++d.next_consume;
        l.progress.consumed = d.next_consume;
    };
    detail::Slot* slot = d.taken.front().first;
    d.taken.pop_front();
    if (l.stager) {  // on the device: the copy was submitted when the batch joined the window
        Impl::Staged st = std::move(d.staged.front());
        d.staged.pop_front();
        out = detail::take_batch(*l.stager, std::move(st.shape));
        l.stats.staging = l.stager->stats();
        account(st.num_valid, st.size, st.step, st.bytes);
        return true;
    }
    // The lease returns the slot to the ring when the last batch copy or tensor is gone.
    std::shared_ptr<detail::Ring> ring = d.prefetch->ring();
    std::shared_ptr<void> lease(slot,
                                [ring](void* s) { ring->release(static_cast<detail::Slot*>(s)); });
    account(slot->num_valid, slot->size, slot->step, slot->bytes);
    out = detail::batch_from_slot(l.source.fields(), *slot, d.epoch, d.plan.first_step + slot->step,
                                  std::move(lease));
    return true;
}

}  // namespace mpistage
