// The monitor thread behind BlockingWatch: deadlines of blocking calls, one thread per process.
#include "comm/blocking_watch.hpp"

#include <mpi.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace mpistage::detail {

namespace {

using Clock = std::chrono::steady_clock;

struct Armed {
    Clock::time_point deadline;
    std::string report;  // the line printed on expiry (built at arming: no allocation later)
    bool abort_mpi = true;  // false: _Exit without MPI_Abort (inside MPI_Finalize)
};

/// Never destroyed (a detached thread waits on it until the process exits).
class Monitor {
public:
    static Monitor& get() {
        static Monitor* monitor = new Monitor();
        return *monitor;
    }

    std::uint64_t arm(Clock::time_point deadline, std::string report, bool abort_mpi = true) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!started_) {
            std::thread([this] { run(); }).detach();
            started_ = true;
        }
        const std::uint64_t id = ++next_id_;
        armed_.emplace(id, Armed{deadline, std::move(report), abort_mpi});
        wake_.notify_one();
        return id;
    }

    void disarm(std::uint64_t id) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        armed_.erase(id);
    }

private:
    void run() {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            if (armed_.empty()) {
                wake_.wait(lock);
                continue;
            }
            auto first = armed_.begin();
            for (auto it = armed_.begin(); it != armed_.end(); ++it) {
                if (it->second.deadline < first->second.deadline) first = it;
            }
            // A copy: wait_until holds its argument by reference while the lock is released,
            // and a guard may disarm (erase) this entry meanwhile.
            const Clock::time_point deadline = first->second.deadline;
            if (Clock::now() < deadline) {
                wake_.wait_until(lock, deadline);
                continue;
            }
            std::fputs(first->second.report.c_str(), stderr);
            std::fflush(stderr);
            // From this thread: the blocked thread cannot. Open MPI's abort is safe to call from
            // any thread of the process; should it return, the process ends anyway and the
            // launcher ends the job.
            if (first->second.abort_mpi) MPI_Abort(MPI_COMM_WORLD, kWatchdogAbortCode);
            std::_Exit(kWatchdogAbortCode);
        }
    }

    std::mutex mutex_;
    std::condition_variable wake_;
    std::map<std::uint64_t, Armed> armed_;
    std::uint64_t next_id_ = 0;
    bool started_ = false;
};

}  // namespace

namespace {

std::string expiry_report(const std::string& call, std::chrono::seconds timeout, int ranks,
                          const std::string& phase) {
    int world_rank = -1;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    return "mpistage watchdog: rank " + std::to_string(world_rank) + ": blocking call " + call +
           " did not return within " + std::to_string(timeout.count()) + " s (" + phase +
           "); a rank of the " + std::to_string(ranks) +
           "-rank communicator did not enter it (stopped, killed, or elsewhere; the ranks that "
           "did enter print this line). Ending the job (exit code " +
           std::to_string(kWatchdogAbortCode) + ").\n";
}

}  // namespace

BlockingWatch::BlockingWatch(const Communicator& comm, std::string call) {
    const auto timeout = comm.timeout();
    if (timeout.count() <= 0 || comm.size() <= 1) return;
    id_ = Monitor::get().arm(Clock::now() + timeout,
                             expiry_report(call, timeout, comm.size(), comm.context().describe()));
}

BlockingWatch::BlockingWatch(std::chrono::seconds timeout, int ranks, std::string call,
                             std::string phase, bool abort_mpi) noexcept {
    if (timeout.count() <= 0 || ranks <= 1) return;
    try {
        id_ = Monitor::get().arm(Clock::now() + timeout,
                                 expiry_report(call, timeout, ranks, phase), abort_mpi);
    } catch (...) {
        id_ = 0;  // no memory for the report: nothing armed
    }
}

BlockingWatch::~BlockingWatch() {
    if (id_ != 0) Monitor::get().disarm(id_);
}

}  // namespace mpistage::detail
