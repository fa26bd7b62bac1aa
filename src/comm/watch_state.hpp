#pragma once
// State of one communicator's watchdog (see Communicator in mpistage/comm.hpp).

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"

namespace mpistage::detail {

struct WatchState {
    std::chrono::seconds timeout = kDefaultCollectiveTimeout;
    CollectiveContext context;
    std::function<void(const std::string&)> on_expiry;
    /// Sequence number of the next watched collective (equal on every rank: collectives are
    /// made in the same order everywhere).
    std::uint64_t next_seq = 0;
    std::chrono::duration<double> wait{0};
    /// Texts of point-to-point notices still being sent (kept alive until they complete).
    std::deque<std::string> outgoing;
    std::vector<MPI_Request> outgoing_requests;
    /// This rank has sent a watchdog notice on this communicator (its peer may not have
    /// received it yet).
    bool sent_any = false;
};

/// Not collective: waits for `request` of watched collective number `seq` of `comm`, polling
/// with a growing sleep; on expiry reports and aborts (or calls the handler). @throws MpiError.
/// Before the communicator is freed: receives and discards watchdog messages already pending
/// (announcements a late rank never answered). Returns false when this rank has ever sent a
/// watchdog notice on `comm`: a notice may still be in flight to a peer that will not receive
/// it, and Open MPI holds a message for a context id that is not (yet) in use until a new
/// communicator takes that id, where its stale sequence number stalls every later message
/// (a hang). The caller then must not free `comm`, so that no communicator spanning this rank
/// can reuse the id; the notices' requests are released and their texts kept. Local.
[[nodiscard]] bool drain_watch_messages(MPI_Comm comm, WatchState& state) noexcept;

void wait_watched(MPI_Comm comm, int rank, int size, WatchState& state, MPI_Request& request,
                  std::uint64_t seq, const char* call);

}  // namespace mpistage::detail
