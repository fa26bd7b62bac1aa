// Streams, events, asynchronous copies and host functions of the CUDA test double
// (fake_cuda.h): everything queued runs late, on the stream's worker thread.
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "fake_engine.hpp"

using mpistage_fake::Allocation;
using mpistage_fake::current_context;
using mpistage_fake::Engine;
using mpistage_fake::Event;
using mpistage_fake::Op;
using mpistage_fake::Stream;

namespace {

cudaError_t ret(cudaError_t rc) {
    if (rc != cudaSuccess) mpistage_fake::last_error() = static_cast<int>(rc);
    return rc;
}

cudaError_t context_device(Engine& e, int& device) {
    if (e.init_fails) return cudaErrorInsufficientDriver;
    if (e.sticky) return static_cast<cudaError_t>(e.sticky);
    if (e.device_count == 0) return cudaErrorNoDevice;
    device = e.context_or_implicit().device;
    return cudaSuccess;
}

cudaError_t resolve(Engine& e, std::unique_lock<std::mutex>& lk, cudaStream_t h,
                    std::shared_ptr<Stream>& out) {
    int device = 0;
    if (const cudaError_t rc = context_device(e, device); rc != cudaSuccess) return rc;
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        if (e.legacy_blocked(device)) {
            // The legacy stream would depend on a capturing blocking stream: the runtime
            // refuses the call and invalidates that capture.
            for (auto& [raw, s] : e.streams) {
                if (s->device == device && s->blocking) e.invalidate(*s);
            }
            return cudaErrorStreamCaptureImplicit;
        }
        out = e.legacy_stream(lk, device);
        return cudaSuccess;
    }
    const auto it = e.streams.find(reinterpret_cast<Stream*>(h));
    if (it == e.streams.end()) return cudaErrorInvalidResourceHandle;
    out = it->second;
    return cudaSuccess;
}

Event* event_of(Engine& e, cudaEvent_t h) {
    const auto it = e.events.find(reinterpret_cast<Event*>(h));
    return it == e.events.end() ? nullptr : it->second.get();
}

// Checks a copy against the allocations (as the runtime does for device pointers) and says
// whether its host source is pageable. `m` held.
cudaError_t check_copy(Engine& e, const Stream& s, void* dst, const void* src, std::size_t n,
                       cudaMemcpyKind kind, bool& pageable_source) {
    const Allocation* d = e.find(dst, n);
    const Allocation* a = e.find(src, n);
    if (kind == cudaMemcpyDefault) {
        const bool dd = d && d->device_memory, sd = a && a->device_memory;
        kind = sd ? (dd ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                  : (dd ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    }
    const bool to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (to_device && (!d || !d->device_memory || d->device != s.device)) {
        return cudaErrorInvalidValue;
    }
    if (from_device && (!a || !a->device_memory || a->device != s.device)) {
        return cudaErrorInvalidValue;
    }
    pageable_source = kind == cudaMemcpyHostToDevice && (!a || a->device_memory);
    return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned int flags) {
    Engine& e = Engine::get();
    int device = 0;
    {
        std::lock_guard<std::mutex> lk(e.m);
        if (const cudaError_t rc = context_device(e, device); rc != cudaSuccess) return ret(rc);
    }
    auto s = e.start_stream(device, (flags & cudaStreamNonBlocking) == 0, false);
    std::lock_guard<std::mutex> lk(e.m);
    e.streams[s.get()] = s;
    *out = reinterpret_cast<cudaStream_t>(s.get());
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* out) {
    return cudaStreamCreateWithFlags(out, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t h) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    int current = 0;  // as the runtime: a thread with no context gets one (device 0's)
    if (const cudaError_t rc = context_device(e, current); rc != cudaSuccess) return ret(rc);
    const auto it = e.streams.find(reinterpret_cast<Stream*>(h));
    if (it == e.streams.end()) return ret(cudaErrorInvalidResourceHandle);
    std::shared_ptr<Stream> s = it->second;
    e.streams.erase(it);
    e.wait_for(lk, *s, s->enqueued);  // the runtime lets queued work finish first
    s->stop = true;
    e.cv.notify_all();
    lk.unlock();
    s->worker.join();
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, h, s); rc != cudaSuccess) return ret(rc);
    if (e.unsafe_during_capture() || s->capture_mode >= 0) {
        e.invalidate(*s);
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    e.wait_for(lk, *s, s->enqueued);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, h, s); rc != cudaSuccess) return ret(rc);
    if (e.unsafe_during_capture() || s->capture_mode >= 0) {
        e.invalidate(*s);
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    return s->done >= s->enqueued ? cudaSuccess : ret(cudaErrorNotReady);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    int device = 0;
    if (const cudaError_t rc = context_device(e, device); rc != cudaSuccess) return ret(rc);
    auto ev = std::make_unique<Event>();
    ev->device = device;
    *out = reinterpret_cast<cudaEvent_t>(ev.get());
    e.events[ev.get()] = std::move(ev);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* out) {
    return cudaEventCreateWithFlags(out, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t h) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    int current = 0;  // as the runtime: a thread with no context gets one (device 0's)
    if (const cudaError_t rc = context_device(e, current); rc != cudaSuccess) return ret(rc);
    return e.events.erase(reinterpret_cast<Event*>(h)) ? cudaSuccess
                                                       : ret(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t stream) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, stream, s); rc != cudaSuccess) return ret(rc);
    Event* ev = event_of(e, h);
    if (!ev || ev->device != s->device) return ret(cudaErrorInvalidResourceHandle);
    if (const int rc = e.injected("cudaEventRecord")) return ret(static_cast<cudaError_t>(rc));
    const std::uint64_t generation = ++ev->generation;
    if (s->capture_mode >= 0) {  // a node of the graph being captured, not a point in time
        ev->stream = s;
        ev->captured = true;
        ev->target = 0;
        return cudaSuccess;
    }
    ev->captured = false;
    Op marker;
    marker.run = [&e, ev, generation] {
        std::lock_guard<std::mutex> g(e.m);
        for (auto& [raw, owned] : e.events) {
            if (raw == ev && ev->generation == generation) {
                ev->completed_at = std::chrono::steady_clock::now();
            }
        }
    };
    ev->stream = s;
    ev->target = e.enqueue(s, std::move(marker));
    return cudaSuccess;
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t h, cudaStream_t stream, unsigned int) {
    return cudaEventRecord(h, stream);
}

cudaError_t cudaEventQuery(cudaEvent_t h) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    if (e.sticky) return ret(static_cast<cudaError_t>(e.sticky));
    const Event* ev = event_of(e, h);
    if (!ev) return ret(cudaErrorInvalidResourceHandle);
    if (e.unsafe_during_capture() || ev->captured) {
        if (ev->captured) e.invalidate(*ev->stream);
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (!ev->stream || ev->stream->done >= ev->target) return cudaSuccess;
    return ret(cudaErrorNotReady);  // sets the thread's last error, as the runtime does
}

cudaError_t cudaEventSynchronize(cudaEvent_t h) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    if (e.sticky) return ret(static_cast<cudaError_t>(e.sticky));
    const Event* ev = event_of(e, h);
    if (!ev) return ret(cudaErrorInvalidResourceHandle);
    if (e.unsafe_during_capture() || ev->captured) {
        if (ev->captured) e.invalidate(*ev->stream);
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (ev->stream) {
        const std::shared_ptr<Stream> s = ev->stream;
        e.wait_for(lk, *s, ev->target);
    }
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    if (e.sticky) return ret(static_cast<cudaError_t>(e.sticky));
    const Event* a = event_of(e, start);
    const Event* b = event_of(e, end);
    if (!a || !b || !a->stream || !b->stream) return ret(cudaErrorInvalidResourceHandle);
    if (a->stream->done < a->target || b->stream->done < b->target) {
        return ret(cudaErrorNotReady);
    }
    *ms = std::chrono::duration<float, std::milli>(b->completed_at - a->completed_at).count();
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t h, unsigned int flags) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, stream, s); rc != cudaSuccess) return ret(rc);
    Event* ev = event_of(e, h);
    if (!ev) return ret(cudaErrorInvalidResourceHandle);
    if (ev->captured && ev->stream != s) {
        // A captured event waited on from outside its capture (CUDA programming guide, "Cross-
        // stream dependencies and events").
        e.invalidate(*ev->stream);
        if (s->capture_mode >= 0) e.invalidate(*s);
        return ret(cudaErrorStreamCaptureIsolation);
    }
    if (ev->captured) return cudaSuccess;  // an edge inside the graph
    if (s->capture_mode >= 0 && ev->stream && (flags & cudaEventWaitExternal) == 0) {
        // A capturing stream waiting on a non-captured event without cudaEventWaitExternal.
        e.invalidate(*s);
        return ret(cudaErrorStreamCaptureIsolation);
    }
    if (ev->stream) e.enqueue_wait(s, ev->stream, ev->target);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, stream, s); rc != cudaSuccess) return ret(rc);
    bool pageable = false;
    if (const cudaError_t rc = check_copy(e, *s, dst, src, n, kind, pageable); rc != cudaSuccess) {
        return ret(rc);
    }
    if (const int rc = e.injected("cudaMemcpyAsync")) return ret(static_cast<cudaError_t>(rc));
    Op op;
    op.delay = e.copy_delay;
    if (pageable) {
        // The runtime stages a pageable source before the call returns; the device side of the
        // copy still happens later.
        ++e.pageable_copies;
        auto staged = std::make_shared<std::vector<unsigned char>>(
            static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
        op.run = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
    } else {
        op.run = [dst, src, n] { std::memcpy(dst, src, n); };
    }
    e.enqueue(s, std::move(op));
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    {
        Engine& e = Engine::get();
        std::lock_guard<std::mutex> lk(e.m);
        if (e.unsafe_during_capture()) return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (const cudaError_t rc = cudaMemcpyAsync(dst, src, n, kind, cudaStreamLegacy);
        rc != cudaSuccess) {
        return rc;
    }
    return cudaStreamSynchronize(cudaStreamLegacy);
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, stream, s); rc != cudaSuccess) return ret(rc);
    const Allocation* a = e.find(p, n);
    if (!a || !a->device_memory || a->device != s->device) return ret(cudaErrorInvalidValue);
    Op op;
    op.delay = e.copy_delay;
    op.run = [p, value, n] { std::memset(p, value, n); };
    e.enqueue(s, std::move(op));
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, stream, s); rc != cudaSuccess) return ret(rc);
    if (const int rc = e.injected("cudaLaunchHostFunc")) return ret(static_cast<cudaError_t>(rc));
    Op op;
    op.run = [fn, user_data] { fn(user_data); };
    op.delay = e.host_func_delay;
    op.host_function = true;
    e.enqueue(s, std::move(op));
    return cudaSuccess;
}

// ---- graph capture ------------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t h, cudaStreamCaptureMode mode) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        return ret(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot capture
    }
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, h, s); rc != cudaSuccess) return ret(rc);
    if (s->capture_mode >= 0) return ret(cudaErrorIllegalState);
    s->capture_mode = static_cast<int>(mode);
    s->capture_invalidated = false;
    s->capture_thread = std::this_thread::get_id();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t* graph) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    *graph = nullptr;
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, h, s); rc != cudaSuccess) return ret(rc);
    if (s->capture_mode < 0) return ret(cudaErrorIllegalState);
    if (s->capture_mode != cudaStreamCaptureModeRelaxed &&
        s->capture_thread != std::this_thread::get_id()) {
        return ret(cudaErrorStreamCaptureWrongThread);
    }
    const bool invalidated = s->capture_invalidated;
    s->capture_mode = -1;
    s->capture_invalidated = false;
    // Events recorded during the capture stay nodes of that graph until recorded again: waiting
    // on one from a stream outside it is still an isolation error.
    if (invalidated) return ret(cudaErrorStreamCaptureInvalidated);
    *graph = reinterpret_cast<cudaGraph_t>(new int(0));  // the double keeps no graph
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete reinterpret_cast<int*>(graph);
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, cudaStreamCaptureStatus* status) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    *status = cudaStreamCaptureStatusNone;
    if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        int device = 0;
        if (const cudaError_t rc = context_device(e, device); rc != cudaSuccess) return ret(rc);
        // The legacy stream while a blocking stream of its device captures (not invalidated).
        return e.legacy_blocked(device) ? ret(cudaErrorStreamCaptureImplicit) : cudaSuccess;
    }
    std::shared_ptr<Stream> s;
    if (const cudaError_t rc = resolve(e, lk, h, s); rc != cudaSuccess) return ret(rc);
    if (s->capture_mode >= 0) {
        *status = s->capture_invalidated ? cudaStreamCaptureStatusInvalidated
                                         : cudaStreamCaptureStatusActive;
    }
    return cudaSuccess;
}

}  // extern "C"
