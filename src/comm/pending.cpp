// A non-blocking allreduce completed later, under the communicator's watchdog.
#include "comm/pending.hpp"

#include <utility>

#include "comm/watch_state.hpp"

namespace mpistage::detail {

PendingAllreduce::PendingAllreduce(const Communicator& comm, std::vector<std::uint64_t> values,
                                   const char* call)
    : state_(std::make_unique<State>()) {
    if (comm.comm_ == MPI_COMM_NULL || !comm.watch_) {
        throw MpiError(std::string("comm: ") + call + " on a freed or moved-from communicator");
    }
    State& s = *state_;
    s.comm = &comm;
    s.call = call;
    s.in = std::move(values);
    s.out.assign(s.in.size(), 0);
    // The sequence number is taken at the start: collectives are numbered in the order every
    // rank starts them, whenever each completes.
    s.seq = comm.watch_->next_seq++;
    check_mpi(MPI_Iallreduce(s.in.data(), s.out.data(), static_cast<int>(s.in.size()), MPI_UINT64_T,
                             MPI_MIN, comm.comm_, &s.request),
              call);
}

PendingAllreduce& PendingAllreduce::operator=(PendingAllreduce&& o) noexcept {
    if (this != &o) {
        finish_quietly();
        state_ = std::move(o.state_);
    }
    return *this;
}

PendingAllreduce::~PendingAllreduce() {
    finish_quietly();
}

void PendingAllreduce::finish_quietly() noexcept {
    if (!state_ || state_->done) return;
    // A collective cannot be cancelled, and waiting here could wait for a rank that never
    // starts it: the request and its buffers (which MPI may still write) are leaked instead.
    (void)state_.release();
}

bool PendingAllreduce::test() {
    if (done()) return true;
    State& s = *state_;
    int flag = 0;
    check_mpi(MPI_Test(&s.request, &flag, MPI_STATUS_IGNORE), s.call);
    s.done = flag != 0;
    return s.done;
}

const std::vector<std::uint64_t>& PendingAllreduce::wait() {
    State& s = *state_;
    if (!s.done) {
        const Communicator& c = *s.comm;
        wait_watched(c.comm_, c.rank_, c.size_, *c.watch_, s.request, s.seq, s.call);
        s.done = true;
    }
    return s.out;
}

}  // namespace mpistage::detail
