// Calls that wait for peers, interruptible by Ctrl-C (see interruptible.hpp).
#include "interruptible.hpp"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

namespace mpistage::python {

namespace {

constexpr std::chrono::milliseconds kSignalSlice{50};

// The one worker thread of the process. Never destroyed: it waits on its condition variable
// when idle, and a thread left at exit must not be joined from a static destructor (std::thread
// would terminate the process); `settle` (called by the package's exit hook) has completed any
// call by then.
struct Worker {
    std::mutex mutex;
    std::condition_variable wake;
    std::condition_variable finished;
    std::function<void()> task;
    bool done = true;

    Worker() {
        std::thread([this] { run(); }).detach();
    }

    void run() {
        for (;;) {
            std::function<void()> t;
            {
                std::unique_lock<std::mutex> lock(mutex);
                wake.wait(lock, [this] { return static_cast<bool>(task); });
                t = std::move(task);
                task = nullptr;
            }
            t();  // catches everything (see interruptible_next)
            {
                std::lock_guard<std::mutex> lock(mutex);
                done = true;
            }
            finished.notify_all();
        }
    }

    void start(std::function<void()> t) {
        {
            std::lock_guard<std::mutex> lock(mutex);
            done = false;
            task = std::move(t);
        }
        wake.notify_one();
    }

    // With the GIL held on entry and exit. `check`: run Python's signal handlers every slice;
    // an exception they raise is thrown (the call stays in flight).
    void wait(bool check) {
        for (;;) {
            {
                py::gil_scoped_release unlocked;
                std::unique_lock<std::mutex> lock(mutex);
                if (finished.wait_for(lock, kSignalSlice, [this] { return done; })) return;
            }
            if (check && PyErr_CheckSignals() != 0) throw py::error_already_set();
        }
    }
};

Worker& worker() {
    static auto* w = new Worker();
    return *w;
}

// The call in flight (or completed, its result not yet taken). Touched with the GIL held,
// except `more`, `batch` and `error`, which only the worker writes while a call runs.
struct InFlight {
    py::object owner;
    bool active = false;
    bool more = false;
    HostBatch batch;
    std::exception_ptr error;
};

InFlight& in_flight() {
    static auto* f = new InFlight();
    return *f;
}

unsigned long main_thread_id = 0;  // NOLINT: set once at import

bool can_interrupt() {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    return level >= MPI_THREAD_SERIALIZED && PyThread_get_thread_ident() == main_thread_id;
}

// Takes the completed call's result; the GIL is held.
bool take(InFlight& f, HostBatch& out) {
    f.active = false;
    std::exception_ptr error = std::exchange(f.error, nullptr);
    const bool more = f.more;
    out = std::move(f.batch);
    f.batch = HostBatch{};
    f.owner = py::object();
    if (error) std::rethrow_exception(error);
    return more;
}

}  // namespace

void init_interruptible() { main_thread_id = PyThread_get_thread_ident(); }

void settle() {
    InFlight& f = in_flight();
    if (!f.active) return;
    worker().wait(false);
    HostBatch dropped;
    try {
        take(f, dropped);
    } catch (...) {
        // The interrupted call's own error: the loader's next call meets it again (the ranks'
        // agreement), so it is not raised a second time here.
    }
    py::gil_scoped_release unlocked;
    dropped = HostBatch{};  // returns the ring slot (may wait for a device fence)
}

bool interruptible_next(const py::handle& owner, const std::function<bool(HostBatch&)>& call,
                        HostBatch& out) {
    InFlight& f = in_flight();
    if (f.active) {
        if (f.owner.is(owner)) {  // the call Ctrl-C interrupted: its batch is the next one
            worker().wait(true);
            return take(f, out);
        }
        settle();
    }
    if (!can_interrupt()) {
        py::gil_scoped_release unlocked;
        return call(out);
    }
    f.owner = py::reinterpret_borrow<py::object>(owner);
    f.active = true;
    worker().start([&f, call] {
        try {
            f.more = call(f.batch);
        } catch (...) {
            f.error = std::current_exception();
        }
    });
    worker().wait(true);
    return take(f, out);
}

}  // namespace mpistage::python
