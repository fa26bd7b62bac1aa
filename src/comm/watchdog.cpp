// The collective watchdog: waits for a non-blocking collective with a deadline and, when it
// expires, finds out which ranks did not arrive and what every rank was doing, then aborts.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include "comm/blocking_watch.hpp"
#include "comm/watch_state.hpp"

namespace mpistage {

std::string CollectiveContext::describe() const {
    std::string out = phase.empty() ? std::string("outside the loader") : phase;
    if (epoch >= 0) out += ", epoch " + std::to_string(epoch);
    if (step >= 0) out += ", step " + std::to_string(step);
    if (!file.empty()) out += ", file " + file;
    if (offset >= 0) out += ", offset " + std::to_string(offset);
    return out;
}

namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTagAnnounce = 0x6d73;  // "the deadline expired here; what are you doing?"
constexpr int kTagReply = 0x6d74;     // "this is what I am doing"
/// How long ranks that noticed an expiry wait for the others to answer.
constexpr std::chrono::seconds kGrace{2};

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

/// How a waiting rank polls: for the first millisecond it polls and yields the core (most
/// collectives complete there, and a sleep would overshoot them: a 20 µs sleep is often 60 µs
/// or more, and at thousands of collectives per second that idles the ranks), then it sleeps
/// 50 µs doubling up to 500 µs, so a rank waiting for a laggard uses little CPU (about 2000
/// wake-ups a second) yet notices within half a millisecond that a descheduled peer came
/// back (with 2 ms it lost up to 2 ms per wait where cores are shared).
class Backoff {
public:
    void pause() {
        if (Clock::now() - start_ < std::chrono::milliseconds(1)) {
            std::this_thread::yield();
            return;
        }
        std::this_thread::sleep_for(sleep_);
        sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(500));
    }

private:
    Clock::time_point start_ = Clock::now();
    std::chrono::microseconds sleep_{50};
};

std::string state_text(int rank, const WatchState& state, std::uint64_t seq, const char* call,
                       Clock::time_point since) {
    std::ostringstream os;
    os.precision(1);
    os << std::fixed << "rank " << rank << ": waiting at collective #" << seq << " (" << call
       << ") for " << seconds_since(since) << " s, " << state.context.describe();
    return os.str();
}

void send_text(MPI_Comm comm, WatchState& state, const std::string& text, int to, int tag) {
    state.outgoing.push_back(text);
    MPI_Request r = MPI_REQUEST_NULL;
    const std::string& kept = state.outgoing.back();
    if (MPI_Isend(kept.data(), static_cast<int>(kept.size()), MPI_CHAR, to, tag, comm, &r) ==
        MPI_SUCCESS) {
        state.outgoing_requests.push_back(r);
        state.sent_any = true;
    }
}

/// Receives one pending message with `tag`, if any: returns its source (−1 when none).
int receive_text(MPI_Comm comm, int tag, std::string& text) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, &st) != MPI_SUCCESS || !flag) return -1;
    int count = 0;
    MPI_Get_count(&st, MPI_CHAR, &count);
    text.assign(static_cast<std::size_t>(std::max(count, 0)), '\0');
    MPI_Recv(text.data(), count, MPI_CHAR, st.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE);
    return st.MPI_SOURCE;
}

/// Answers every pending "what are you doing?" with `mine()` (built only when asked).
/// Records the announcers' own texts in `heard` when given.
template <class Mine>
void answer_announcements(MPI_Comm comm, WatchState& state, const Mine& mine,
                          std::map<int, std::string>* heard) {
    std::string text;
    for (int from = receive_text(comm, kTagAnnounce, text); from >= 0;
         from = receive_text(comm, kTagAnnounce, text)) {
        send_text(comm, state, mine(), from, kTagReply);
        if (heard) (*heard)[from] = text;
    }
}

std::string build_report(int size, std::uint64_t seq, const char* call, const WatchState& state,
                         const std::map<int, std::string>& heard) {
    std::string missing;
    int count = 0;
    for (int r = 0; r < size; ++r) {
        if (heard.count(r)) continue;
        if (++count <= 32) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (count > 32) missing += " and " + std::to_string(count - 32) + " more";
    std::string out = "mpistage watchdog: collective #" + std::to_string(seq) + " (" + call +
                      ") did not complete within " + std::to_string(state.timeout.count()) +
                      " s on a communicator of " + std::to_string(size) + " ranks. ";
    out += count == 0 ? std::string("Every rank answered (ranks are in different collectives?). ")
                      : "Rank(s) that did not arrive: " + missing + " (no answer within " +
                            std::to_string(kGrace.count()) +
                            " s: stopped, killed, or busy outside the library's collectives; "
                            "each completed collective #" +
                            std::to_string(seq == 0 ? 0 : seq - 1) +
                            " with the others and did not reach #" + std::to_string(seq) + "). ";
    out += "What each rank was doing:";
    for (int r = 0; r < size && r < 64; ++r) {
        const auto it = heard.find(r);
        out +=
            "\n  " + (it != heard.end() ? it->second : "rank " + std::to_string(r) + ": no answer");
    }
    if (size > 64) out += "\n  ...";
    return out;
}

/// The deadline expired on this rank: asks every other rank what it is doing, waits kGrace
/// for the answers, then reports. The lowest rank that noticed the expiry prints and aborts.
void expire(MPI_Comm comm, int rank, int size, WatchState& state, std::uint64_t seq,
            const char* call, Clock::time_point since) {
    const std::string mine = state_text(rank, state, seq, call, since);
    for (int r = 0; r < size; ++r) {
        if (r != rank) send_text(comm, state, mine, r, kTagAnnounce);
    }
    std::map<int, std::string> heard{{rank, mine}};
    int lowest_announcer = rank;
    const auto end = Clock::now() + kGrace;
    std::string text;
    while (Clock::now() < end && static_cast<int>(heard.size()) < size) {
        std::map<int, std::string> announcers;
        answer_announcements(
            comm, state, [&] { return mine; }, &announcers);
        for (const auto& [from, t] : announcers) {
            heard[from] = t;
            lowest_announcer = std::min(lowest_announcer, from);
        }
        for (int from = receive_text(comm, kTagReply, text); from >= 0;
             from = receive_text(comm, kTagReply, text)) {
            heard[from] = text;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const std::string report = build_report(size, seq, call, state, heard);
    if (state.on_expiry) {
        state.on_expiry(report);
        return;
    }
    if (rank == lowest_announcer) {
        std::fprintf(stderr, "%s\nAborting the job (MPI_Abort).\n", report.c_str());
        std::fflush(stderr);
    } else {
        // The lowest announcer prints and aborts; this is the fallback if it cannot.
        std::this_thread::sleep_for(kGrace);
        std::fprintf(stderr,
                     "mpistage watchdog: rank %d aborts after collective #%llu (%s) "
                     "expired\n",
                     rank, static_cast<unsigned long long>(seq), call);
        std::fflush(stderr);
    }
    MPI_Abort(comm, kWatchdogAbortCode);
}

void forget_sent(WatchState& state) {
    if (state.outgoing_requests.empty()) return;
    int done = 0;
    MPI_Testall(static_cast<int>(state.outgoing_requests.size()), state.outgoing_requests.data(),
                &done, MPI_STATUSES_IGNORE);
    if (!done) return;
    state.outgoing_requests.clear();
    state.outgoing.clear();
}

}  // namespace

bool drain_watch_messages(MPI_Comm comm, WatchState& state) noexcept {
    std::string text;
    while (receive_text(comm, kTagAnnounce, text) >= 0 || receive_text(comm, kTagReply, text) >= 0) {
    }
    if (!state.sent_any) return true;
    // Kept until MPI_Finalize: a send still in flight reads its text, and the communicator
    // stays allocated (see the declaration). At most one set per watchdog expiry.
    static auto* retired = new std::deque<std::string>();
    for (auto& r : state.outgoing_requests) {
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    state.outgoing_requests.clear();
    for (auto& t : state.outgoing) retired->push_back(std::move(t));
    state.outgoing.clear();
    return false;
}

void wait_watched(MPI_Comm comm, int rank, int size, WatchState& state, MPI_Request& request,
                  std::uint64_t seq, const char* call) {
    const auto start = Clock::now();
    const bool watched = state.timeout.count() > 0 && size > 1;
    const auto deadline = start + state.timeout;
    bool expired = false;
    Backoff backoff;
    for (;;) {
        int done = 0;
        check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
        if (done) break;
        if (watched) {
            const auto mine = [&] { return state_text(rank, state, seq, call, start); };
            answer_announcements(comm, state, mine, nullptr);
            if (!expired && Clock::now() >= deadline) {
                expire(comm, rank, size, state, seq, call, start);
                expired = true;  // only reached with an expiry handler: wait without deadline
            }
        }
        backoff.pause();
    }
    state.wait += Clock::now() - start;
    forget_sent(state);
}

}  // namespace detail
}  // namespace mpistage
