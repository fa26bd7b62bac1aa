// The CUDA test double's engine: streams run their work late, on their own threads
// (fake_engine.hpp).
#include "fake_engine.hpp"

#include <driver_types.h>

#include <cstdlib>
#include <string>

namespace mpistage_fake {

namespace {

long env_long(const char* name, long fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    return std::strtol(v, nullptr, 10);
}

// The MPI rank from the launcher's environment (the double has no MPI of its own).
long launcher_rank() {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
        const long r = env_long(name, -1);
        if (r >= 0) return r;
    }
    return 0;
}

}  // namespace

Engine& Engine::get() {
    // Never destroyed: worker threads may still be parked when the process exits.
    static Engine* engine = [] {
        auto* e = new Engine();
        e->device_count = static_cast<int>(env_long("MPISTAGE_FAKE_CUDA_DEVICES", 2));
        if (e->device_count < 0) e->device_count = 0;
        e->copy_delay =
            std::chrono::microseconds(env_long("MPISTAGE_FAKE_CUDA_COPY_DELAY_US", 3000));
        e->host_func_delay =
            std::chrono::microseconds(env_long("MPISTAGE_FAKE_CUDA_HOST_FUNC_DELAY_US", 500));
        const long fail_rank = env_long("MPISTAGE_FAKE_CUDA_FAIL_RANK", -1);
        e->init_fails = fail_rank >= 0 && fail_rank == launcher_rank();
        e->contexts.resize(static_cast<std::size_t>(e->device_count));
        for (int d = 0; d < e->device_count; ++d)
            e->contexts[static_cast<std::size_t>(d)].device = d;
        e->context_created.assign(static_cast<std::size_t>(e->device_count), false);
        e->implicit_inits.assign(static_cast<std::size_t>(e->device_count), 0);
        e->legacy.resize(static_cast<std::size_t>(e->device_count));
        e->device_bytes.assign(static_cast<std::size_t>(e->device_count), 0);
        return e;
    }();
    // Every exported CUDA call starts here: one made by a host function is counted (the
    // engine's lock is not held by the worker while the function runs).
    if (in_host_function()) {
        std::lock_guard<std::mutex> lk(engine->m);
        ++engine->calls_in_host_functions;
    }
    return *engine;
}

Context& Engine::context_or_implicit() {
    Context*& cur = current_context();
    if (!cur) {
        cur = &contexts[0];
        context_created[0] = true;
        ++implicit_inits[0];
    }
    return *cur;
}

const Allocation* Engine::find(const void* p, std::size_t n) const {
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    auto it = allocations.upper_bound(addr);
    if (it == allocations.begin()) return nullptr;
    --it;
    if (addr + n > it->first + it->second.size_bytes) return nullptr;
    return &it->second;
}

std::shared_ptr<Stream> Engine::start_stream(int device, bool blocking, bool legacy_stream) {
    auto s = std::make_shared<Stream>();
    s->device = device;
    s->blocking = blocking;
    s->legacy = legacy_stream;
    s->worker = std::thread([this, s] { work(s); });
    return s;
}

void Engine::work(const std::shared_ptr<Stream>& s) {
    std::unique_lock<std::mutex> lk(m);
    for (;;) {
        cv.wait(lk, [&] { return s->stop || !s->queue.empty(); });
        if (s->queue.empty()) return;
        Op op = std::move(s->queue.front());
        s->queue.pop_front();
        lk.unlock();
        if (op.delay.count() > 0) std::this_thread::sleep_for(op.delay);
        lk.lock();
        const bool run = sticky == 0 && op.generation == sticky_generation;
        lk.unlock();
        if (run) {  // after a sticky error nothing queued runs (host functions included)
            in_host_function() = op.host_function;
            op.run();
            in_host_function() = false;
        }
        lk.lock();
        ++s->done;
        cv.notify_all();
    }
}

void Engine::enqueue_wait(const std::shared_ptr<Stream>& s, std::shared_ptr<Stream> other,
                          std::uint64_t target) {
    if (other.get() == s.get() || other->done >= target || s->capture_mode >= 0) return;
    Op op;
    op.run = [this, other, target] {
        std::unique_lock<std::mutex> lk(m);
        wait_for(lk, *other, target);
    };
    op.generation = sticky_generation;
    s->queue.push_back(std::move(op));
    ++s->enqueued;
    cv.notify_all();
}

std::uint64_t Engine::enqueue(const std::shared_ptr<Stream>& s, Op op) {
    if (s->capture_mode >= 0) return s->enqueued;  // captured into the graph: never runs here
    // The legacy default stream waits for the blocking streams of its device and they wait
    // for it (cudaStreamNonBlocking streams take part in neither).
    if (s->legacy) {
        for (auto& [raw, other] : streams) {
            if (other->device == s->device && other->blocking) {
                enqueue_wait(s, other, other->enqueued);
            }
        }
    } else if (s->blocking) {
        const auto& l = legacy[static_cast<std::size_t>(s->device)];
        if (l) enqueue_wait(s, l, l->enqueued);
    }
    op.generation = sticky_generation;
    s->queue.push_back(std::move(op));
    ++s->enqueued;
    cv.notify_all();
    return s->enqueued;
}

void Engine::wait_for(std::unique_lock<std::mutex>& lk, const Stream& s, std::uint64_t target) {
    cv.wait(lk, [&] { return s.done >= target; });
}

void Engine::drain(std::unique_lock<std::mutex>& lk, int device) {
    std::vector<std::shared_ptr<Stream>> all;
    for (auto& [raw, s] : streams) all.push_back(s);
    for (auto& s : legacy) {
        if (s) all.push_back(s);
    }
    for (auto& s : all) {
        if (device < 0 || s->device == device) wait_for(lk, *s, s->enqueued);
    }
}

std::shared_ptr<Stream> Engine::legacy_stream(std::unique_lock<std::mutex>& lk, int device) {
    auto& slot = legacy[static_cast<std::size_t>(device)];
    if (!slot) {
        lk.unlock();
        auto s = start_stream(device, true, true);
        lk.lock();
        if (!slot) {
            slot = std::move(s);
        } else {
            s->stop = true;  // another thread won: retire ours
            cv.notify_all();
            lk.unlock();
            s->worker.join();
            lk.lock();
        }
    }
    return slot;
}

bool Engine::unsafe_during_capture() {
    bool forbidden = false;
    for (auto& [raw, s] : streams) {
        if (s->capture_mode < 0) continue;
        const bool own = s->capture_thread == std::this_thread::get_id();
        const bool applies = s->capture_mode == cudaStreamCaptureModeGlobal ||
                             (own && s->capture_mode != cudaStreamCaptureModeRelaxed);
        if (applies) {
            invalidate(*s);
            forbidden = true;
        }
    }
    return forbidden;
}

bool Engine::legacy_blocked(int device) const {
    for (const auto& [raw, s] : streams) {
        if (s->device == device && s->blocking && s->capture_mode >= 0) return true;
    }
    return false;
}

void Engine::invalidate(Stream& s) {
    if (s.capture_mode >= 0 && !s.capture_invalidated) {
        s.capture_invalidated = true;
        ++invalidated_captures;
    }
}

int Engine::injected(const char* call) {
    const auto it = injections.find(call);
    if (it == injections.end()) return 0;
    if (it->second.skip > 0) {
        --it->second.skip;
        return 0;
    }
    const int rc = it->second.rc;
    injections.erase(it);
    return rc;
}

bool& in_host_function() {
    thread_local bool inside = false;
    return inside;
}

Context*& current_context() {
    thread_local Context* current = nullptr;
    return current;
}

int& last_error() {
    thread_local int error = 0;
    return error;
}

}  // namespace mpistage_fake
