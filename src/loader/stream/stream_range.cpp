// The one Loader over a StreamSource: construction, restore, state, epochs and the batches of an
// EpochRange, each handed to the stream engine (stream_engine.hpp).
#include <chrono>

#include "comm/agree.hpp"
#include "loader/device_delivery.hpp"
#include "loader/loader_impl.hpp"
#include "loader/stream/stream_engine.hpp"

namespace mpistage {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Loader::Loader(std::unique_ptr<detail::StreamEngine> stream) : stream_(std::move(stream)) {}

Loader::Loader(CommRef comm, const StreamSource& source, LoaderOptions options)
    : Loader(std::make_unique<detail::StreamEngine>(comm, source, std::move(options), nullptr)) {}

Loader Loader::restore(CommRef comm, const StreamSource& source, LoaderOptions options,
                       const LoaderState& state) {
    return Loader(std::make_unique<detail::StreamEngine>(comm, source, std::move(options), &state));
}

LoaderInput Loader::input() const noexcept {
    return stream_ ? LoaderInput::stream : LoaderInput::files;
}

const Source& Loader::source() const {
    if (stream_) throw ConfigError("loader: source() of a loader over streams (stream_source())");
    return impl_->source;
}

const StreamSource& Loader::stream_source() const {
    if (!stream_) throw ConfigError("loader: stream_source() of a loader over files (source())");
    return stream_->source;
}

void detail::StreamEngine::detach(void* range) noexcept {
    if (active_range == range) active_range = nullptr;
}

void EpochRange::Impl::detach_stream() noexcept {
    if (stream) stream->detach(this);
    stream = nullptr;
}

EpochRange Loader::stream_epoch(std::uint64_t e, EpochOptions eo) {
    detail::StreamEngine& m = *stream_;
    if (m.closed) {
        throw ConfigError("loader: epoch " + std::to_string(e) +
                          " requested after the loader was closed");
    }
    m.comm.set_context({"loader: epoch start", static_cast<std::int64_t>(e), 0, "", -1});
    // The same epoch and options everywhere, and no rank with a range still in flight.
    run_agreed(m.comm, [&] {
        if (m.active_range) {
            throw ConfigError("loader: epoch " + std::to_string(e) +
                              " requested while another epoch of this loader is still in "
                              "flight");
        }
    });
    require_same(
        m.comm,
        {{"epoch", std::to_string(e)}, {"EpochOptions::max_steps", std::to_string(eo.max_steps)}},
        "loader: ranks asked for different epochs",
        "every rank must call epoch() with the same epoch and options");
    m.begin_pass(e);
    auto impl = std::make_unique<EpochRange::Impl>();
    impl->of_stream = true;
    impl->stream = &m;
    impl->epoch = e;
    impl->limit = eo.max_steps;
    m.active_range = impl.get();
    return EpochRange(std::move(impl));
}

bool EpochRange::Impl::next_stream(HostBatch& out) {
    out = HostBatch();
    if (finished || stopped) return false;
    if (!stream) {
        throw ConfigError("loader: epoch " + std::to_string(epoch) +
                          ": the loader was closed or destroyed before this epoch's range "
                          "(a range must not outlive its loader)");
    }
    detail::StreamEngine& m = *stream;
    const auto t0 = Clock::now();
    if (next_consume == 0) started = t0;
    const auto end_range = [&] {
        finished = true;
        // Account every copy of the pass (waits for the last ones); trim the device pool.
        if (m.stager) detail::settle_epoch(*m.stager, m.stats.staging);
        if (next_consume > 0) m.stats.epoch_time += Clock::now() - started;
        m.stats.wait_time += Clock::now() - t0;
        detach_stream();
        return false;
    };
    // EpochOptions::max_steps: every rank yields the same steps, so every rank ends here.
    if (limit > 0 && next_consume >= limit) return end_range();
    // On an error the engine keeps the agreed error: later calls throw it again.
    const bool stop = stop_request.load(std::memory_order_relaxed) || mpistage::stop_requested();
    const bool more = m.next(out, stop);
    if (!more) {
        stopped = m.stopped;
        return end_range();
    }
    ++next_consume;
    last_oversize = m.last_oversize;
    m.stats.wait_time += Clock::now() - t0;
    return true;
}

}  // namespace mpistage
