#pragma once
// The state of the CUDA test double (fake_cuda.h): devices and their contexts, streams with a
// worker thread each, events, and the registry of "device" and pinned allocations. Every
// member is guarded by Engine::m; work items run outside it.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mpistage_fake {

/// A device's (primary) context; its address is the CUcontext handed out.
struct Context {
    int device = 0;
};

struct Stream;

/// One queued work item: runs on the stream's worker, after `delay`.
struct Op {
    std::function<void()> run;
    std::chrono::microseconds delay{0};
    /// A host function (cudaLaunchHostFunc): it must make no CUDA call (the runtime documents
    /// a deadlock), which `Engine::get` counts while it runs.
    bool host_function = false;
    /// `Engine::sticky_generation` when queued: an item queued before a sticky error never
    /// runs, even once a test clears the error (the memory it would touch may be freed).
    std::uint64_t generation = 0;
};

/// A stream: FIFO of work items executed in order by its own worker thread.
struct Stream {
    int device = 0;
    bool blocking = true;  // synchronises with the legacy default stream
    bool legacy = false;   // the legacy default stream of `device`
    std::deque<Op> queue;
    std::uint64_t enqueued = 0;  // items ever queued
    std::uint64_t done = 0;      // items finished
    bool stop = false;
    std::thread worker;
    /// While a graph capture runs on the stream (cudaStreamBeginCapture): its mode (a
    /// cudaStreamCaptureMode value), else -1. Work queued meanwhile is captured, not run.
    int capture_mode = -1;
    bool capture_invalidated = false;  // an unsafe call or a crossing dependency happened
    std::thread::id capture_thread;
};

/// An event: complete once `stream` finished its first `target` items.
struct Event {
    int device = 0;
    std::shared_ptr<Stream> stream;  // null: never recorded (complete)
    std::uint64_t target = 0;
    std::uint64_t generation = 0;
    std::chrono::steady_clock::time_point completed_at{};
    /// Last recorded on `stream` while it was capturing: a node of that graph, not a point in
    /// time (querying it, or waiting on it from outside the capture, is an error).
    bool captured = false;
};

/// A failure injected into the next calls of one CUDA function (fake_cuda.h).
struct Injection {
    unsigned skip = 0;  // calls that still succeed first
    int rc = 0;         // the cudaError_t value then returned once
};

/// One allocation of cudaMalloc (device) or cudaHostAlloc/cudaMallocHost (pinned).
struct Allocation {
    std::size_t size_bytes = 0;
    bool device_memory = false;
    int device = 0;
};

struct Engine {
    std::mutex m;
    std::condition_variable cv;  // a stream finished an item, or an event completed
    int device_count = 2;
    bool init_fails = false;
    /// A sticky context error (a cudaError_t value, 0: none), as after an illegal address in a
    /// kernel: every later call needing the context returns it, queued copies and host
    /// functions never run (their items are dropped), every wait returns at once.
    int sticky = 0;
    /// Sticky errors set so far (see `Op::generation`).
    std::uint64_t sticky_generation = 0;
    std::chrono::microseconds copy_delay{3000};
    /// cudaFree synchronises (the runtime's behaviour); off (mpistage_fake_cuda_set_free_syncs),
    /// it frees at once and poisons the bytes (0xDD), kept mapped until exit, so work still
    /// queued on a stream reads poison: code that relies on cudaFree's synchronisation instead
    /// of its own fences (a stream-ordered allocator's semantics) is caught.
    bool free_syncs = true;
    std::vector<void*> quarantine;
    // Before each host function (the runtime calls them from its own thread, some time after
    // the work queued before them completed: an event recorded just before one completes
    // first).
    std::chrono::microseconds host_func_delay{500};
    std::vector<Context> contexts;
    std::vector<bool> context_created;
    // Per device: times a call on a thread with no current context made the device's context
    // current by itself (the runtime's implicit initialisation), since the last reset.
    std::vector<unsigned long long> implicit_inits;
    std::vector<std::shared_ptr<Stream>> legacy;  // per device, made on first use
    std::map<Stream*, std::shared_ptr<Stream>> streams;
    std::map<Event*, std::unique_ptr<Event>> events;
    std::map<std::uintptr_t, Allocation> allocations;  // by start address
    unsigned long long pageable_copies = 0;
    /// CUDA calls made from inside a host function (counted by `get`; should stay 0).
    unsigned long long calls_in_host_functions = 0;
    /// Captures invalidated so far (by an unsafe call, the legacy stream or a crossing event).
    unsigned long long invalidated_captures = 0;
    /// Failures injected by mpistage_fake_cuda_fail_next, by function name.
    std::map<std::string, Injection> injections;
    /// cudaMalloc bytes allowed per device (0: no limit) and in use per device.
    std::size_t device_memory_limit = 0;
    std::vector<std::size_t> device_bytes;

    /// The process's engine (constructed on first use, from the environment).
    static Engine& get();

    /// The allocation holding [p, p + n), or nullptr. Call with `m` held.
    const Allocation* find(const void* p, std::size_t n) const;
    /// Starts a stream's worker; returns its handle. Call without `m` held.
    std::shared_ptr<Stream> start_stream(int device, bool blocking, bool legacy_stream);
    /// Queues `op` on `s`, first making it wait as the legacy stream semantics require, and
    /// returns the number of items queued on `s` after it. Call with `m` held.
    std::uint64_t enqueue(const std::shared_ptr<Stream>& s, Op op);
    /// Makes `s` wait (in its queue) until `other` finished `target` items. `m` held.
    void enqueue_wait(const std::shared_ptr<Stream>& s, std::shared_ptr<Stream> other,
                      std::uint64_t target);
    /// Blocks until `s` finished `target` items. `lk` holds `m`.
    void wait_for(std::unique_lock<std::mutex>& lk, const Stream& s, std::uint64_t target);
    /// Blocks until every stream of `device` (all devices when −1) is idle. `lk` holds `m`.
    void drain(std::unique_lock<std::mutex>& lk, int device);
    /// The calling thread's current context, made (device 0's, created if needed) and counted
    /// in `implicit_inits` when the thread has none: what the runtime does for a call that
    /// needs a context. Call with `m` held.
    Context& context_or_implicit();
    /// The legacy default stream of `device`. `m` held; may start it (drops and retakes `lk`).
    std::shared_ptr<Stream> legacy_stream(std::unique_lock<std::mutex>& lk, int device);
    /// A potentially unsafe call (cudaMalloc, frees, queries, synchronisations) made by this
    /// thread while a capture forbids it (this thread's own capture not in relaxed mode, or a
    /// global-mode capture on any thread, as cudaStreamCaptureModeGlobal documents):
    /// invalidates those captures and returns true (the call then fails with
    /// cudaErrorStreamCaptureUnsupported). `m` held.
    bool unsafe_during_capture();
    /// True when a blocking stream of `device` is capturing: the legacy default stream, which
    /// synchronises with it, may not be used (cudaErrorStreamCaptureImplicit). `m` held.
    bool legacy_blocked(int device) const;
    /// Invalidates the capture running on `s`. `m` held.
    void invalidate(Stream& s);
    /// The injected failure of the function `call` due now (0: none). `m` held.
    int injected(const char* call);

private:
    void work(const std::shared_ptr<Stream>& s);
};

/// True on a stream worker while it runs a host function.
bool& in_host_function();
/// The calling thread's current context (nullptr: none).
Context*& current_context();
/// The calling thread's last error (a cudaError_t value).
int& last_error();

}  // namespace mpistage_fake
