#include "mpistage/comm.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "comm/agree.hpp"
#include "comm/blocking_watch.hpp"
#include "comm/launcher_check.hpp"
#include "comm/node_map.hpp"
#include "comm/watch_state.hpp"
#include "util/memory_budget.hpp"

namespace mpistage {

void throw_error(ErrorKind kind, const std::string& what) {
    switch (kind) {
        case ErrorKind::config:
            throw ConfigError(what);
        case ErrorKind::io:
            throw IoError(what);
        case ErrorKind::format:
            throw FormatError(what);
        case ErrorKind::mpi:
            throw MpiError(what);
        case ErrorKind::hdf5:
            throw Hdf5Error(what);
        case ErrorKind::cuda:
            throw CudaError(what);
        case ErrorKind::generic:
            break;
    }
    throw Error(what);
}

void check_mpi(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) std::strcpy(text, "unknown MPI error");
    int rank = -1;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    throw MpiError(std::string("comm: ") + call + " failed on world rank " + std::to_string(rank) +
                   ": " + text);
}

Communicator::Communicator(MPI_Comm user_comm, std::chrono::seconds timeout)
    : watch_(std::make_unique<detail::WatchState>()) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) throw MpiError("comm: MPI is not initialised; call MPI_Init first");
    if (user_comm == MPI_COMM_NULL) throw ConfigError("comm: the communicator is MPI_COMM_NULL");
    detail::check_launcher();
    check_timeout(timeout, "comm: the communicator's watchdog deadline");
    set_timeout(timeout);
    // Local: the watch below needs the size (a world of one arms nothing).
    check_mpi(MPI_Comm_size(user_comm, &size_), "MPI_Comm_size");
    CollectiveContext setup;
    setup.phase = "comm: construct the library's communicator";
    set_context(setup);
    {
        const detail::BlockingWatch watch(*this, "MPI_Comm_dup");
        check_mpi(MPI_Comm_dup(user_comm, &comm_), "MPI_Comm_dup");
    }
    // On the duplicate only: the user's communicator keeps its own error handler.
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    // No node split here: it is made once, by split_node(), where the node is needed (issue
    // 38: each conversion of MPI_COMM_WORLD used to split it).
    set_context({});
}

Communicator Communicator::duplicate() const {
    if (comm_ == MPI_COMM_NULL || !watch_) {
        throw MpiError("comm: duplicate() of a freed or moved-from communicator");
    }
    Communicator copy;
    copy.watch_ = std::make_unique<detail::WatchState>();
    copy.set_timeout(timeout());
    copy.set_context(context());
    {
        const detail::BlockingWatch watch(*this, "MPI_Comm_dup");
        check_mpi(MPI_Comm_dup(comm_, &copy.comm_), "MPI_Comm_dup");
    }
    check_mpi(MPI_Comm_set_errhandler(copy.comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    copy.rank_ = rank_;
    copy.size_ = size_;
    // The node split is a property of the group, which the duplicate shares: inherited, so
    // an object built from a split communicator never splits again.
    copy.node_ = node_;
    copy.set_context({});
    return copy;
}

void Communicator::split_node() const {
    if (node_) return;
    if (comm_ == MPI_COMM_NULL || !watch_) {
        throw MpiError("comm: split_node() of a freed or moved-from communicator");
    }
    MPI_Comm node = MPI_COMM_NULL;
    {
        const detail::BlockingWatch watch(*this, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
        check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
                  "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    }
    auto state = std::make_shared<detail::NodeState>();
    // Owned from here, so an error below frees it.
    state->comm = std::make_shared<const detail::OwnedComm>(node);
    check_mpi(MPI_Comm_rank(node, &state->rank), "MPI_Comm_rank(node)");
    check_mpi(MPI_Comm_size(node, &state->size), "MPI_Comm_size(node)");
    node_ = std::move(state);
}

bool Communicator::has_node_split() const noexcept {
    return node_ != nullptr;
}

namespace {
[[noreturn]] void throw_no_node_split(const char* what) {
    throw ConfigError(std::string("comm: ") + what +
                      "() before the node split: call split_node() on every rank at the same "
                      "point first (it is collective the first time)");
}
}  // namespace

int Communicator::node_rank() const {
    if (!node_) throw_no_node_split("node_rank");
    return node_->rank;
}

int Communicator::node_size() const {
    if (!node_) throw_no_node_split("node_size");
    return node_->size;
}

Communicator::Communicator(Communicator&& other) noexcept
    : watch_(std::move(other.watch_)),
      comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      rank_(other.rank_),
      size_(other.size_),
      node_(std::move(other.node_)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
    if (this != &other) {
        free();
        watch_ = std::move(other.watch_);
        comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
        rank_ = other.rank_;
        size_ = other.size_;
        node_ = std::move(other.node_);
    }
    return *this;
}

Communicator::~Communicator() {
    free();
}

void Communicator::free() noexcept {
    // The node communicator is freed with the last of the communicators and node maps that
    // share it (OwnedComm frees only while MPI is initialised).
    node_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
        comm_ = MPI_COMM_NULL;
        return;
    }
    if (comm_ == MPI_COMM_NULL) return;
    // After a watchdog exchange the communicator is left allocated (drain_watch_messages says
    // why); it is released by MPI_Finalize.
    if (!watch_ || detail::drain_watch_messages(comm_, *watch_)) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
}

Communicator CommRef::duplicate() const {
    if (donor_ != nullptr) {
        // Handed over by the library function that made it for this one object.
        if (donor_->get() == MPI_COMM_NULL) {
            throw MpiError("comm: a handed-over communicator was taken twice (internal error)");
        }
        return std::move(*donor_);
    }
    if (comm_ != nullptr) return comm_->duplicate();
    return Communicator(raw_, timeout_);
}

void check_timeout(std::chrono::seconds timeout, const std::string& what) {
    if (timeout.count() < 0 || timeout > kMaxTimeout) {
        throw ConfigError(what + ": timeout " + std::to_string(timeout.count()) + " s is " +
                          (timeout.count() < 0 ? "negative" : "too large") +
                          "; accepted: 0 (the watchdog off) to " +
                          std::to_string(kMaxTimeout.count()) + " s");
    }
}

void Communicator::set_timeout(std::chrono::seconds timeout) noexcept {
    if (watch_) watch_->timeout = std::clamp(timeout, std::chrono::seconds(0), kMaxTimeout);
}
std::chrono::seconds Communicator::timeout() const noexcept {
    return watch_ ? watch_->timeout : std::chrono::seconds(0);
}
void Communicator::set_context(CollectiveContext context) const {
    if (watch_) watch_->context = std::move(context);
}
const CollectiveContext& Communicator::context() const noexcept {
    static const CollectiveContext none;
    return watch_ ? watch_->context : none;
}
void Communicator::set_expiry_handler(std::function<void(const std::string&)> handler) {
    if (watch_) watch_->on_expiry = std::move(handler);
}
std::chrono::duration<double> Communicator::collective_wait() const noexcept {
    return watch_ ? watch_->wait : std::chrono::duration<double>(0);
}

void Communicator::watched(const char* call, const std::function<int(MPI_Request*)>& start) const {
    if (comm_ == MPI_COMM_NULL || !watch_) {
        throw MpiError(std::string("comm: ") + call + " on a freed or moved-from communicator");
    }
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(start(&request), call);
    detail::wait_watched(comm_, rank_, size_, *watch_, request, watch_->next_seq++, call);
}

void Communicator::barrier() const {
    watched("MPI_Ibarrier", [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
}

std::uint64_t Communicator::allreduce_sum(std::uint64_t value) const {
    std::uint64_t out = 0;
    watched("MPI_Iallreduce(sum)", [&](MPI_Request* r) {
        return MPI_Iallreduce(&value, &out, 1, MPI_UINT64_T, MPI_SUM, comm_, r);
    });
    return out;
}
std::uint64_t Communicator::allreduce_max(std::uint64_t value) const {
    std::uint64_t out = 0;
    watched("MPI_Iallreduce(max)", [&](MPI_Request* r) {
        return MPI_Iallreduce(&value, &out, 1, MPI_UINT64_T, MPI_MAX, comm_, r);
    });
    return out;
}
std::uint64_t Communicator::allreduce_min(std::uint64_t value) const {
    std::uint64_t out = 0;
    watched("MPI_Iallreduce(min)", [&](MPI_Request* r) {
        return MPI_Iallreduce(&value, &out, 1, MPI_UINT64_T, MPI_MIN, comm_, r);
    });
    return out;
}
std::vector<std::uint64_t> Communicator::allreduce_min(
    const std::vector<std::uint64_t>& values) const {
    std::vector<std::uint64_t> out(values.size());
    if (values.empty()) {
        barrier();
        return out;
    }
    watched("MPI_Iallreduce(min, vector)", [&](MPI_Request* r) {
        return MPI_Iallreduce(values.data(), out.data(), static_cast<int>(values.size()),
                              MPI_UINT64_T, MPI_MIN, comm_, r);
    });
    return out;
}
std::vector<std::uint64_t> Communicator::allreduce_sum(
    const std::vector<std::uint64_t>& values) const {
    std::vector<std::uint64_t> out(values.size());
    if (values.empty()) {
        barrier();
        return out;
    }
    // Unsigned addition wraps modulo 2^64 (MPI_SUM on MPI_UINT64_T is C addition).
    watched("MPI_Iallreduce(sum, vector)", [&](MPI_Request* r) {
        return MPI_Iallreduce(values.data(), out.data(), static_cast<int>(values.size()),
                              MPI_UINT64_T, MPI_SUM, comm_, r);
    });
    return out;
}
std::uint64_t Communicator::exscan_sum(std::uint64_t value) const {
    std::uint64_t out = 0;
    watched("MPI_Iexscan", [&](MPI_Request* r) {
        return MPI_Iexscan(&value, &out, 1, MPI_UINT64_T, MPI_SUM, comm_, r);
    });
    if (rank_ == 0) out = 0;  // MPI leaves rank 0's result undefined
    return out;
}
std::vector<std::uint64_t> Communicator::allgather(std::uint64_t value) const {
    return allgather(std::vector<std::uint64_t>{value});
}
std::vector<std::uint64_t> Communicator::allgather(const std::vector<std::uint64_t>& values) const {
    const int k = static_cast<int>(values.size());
    std::vector<std::uint64_t> out(values.size() * static_cast<std::size_t>(size_));
    if (k == 0) {
        barrier();
        return out;
    }
    watched("MPI_Iallgather", [&](MPI_Request* r) {
        return MPI_Iallgather(values.data(), k, MPI_UINT64_T, out.data(), k, MPI_UINT64_T, comm_,
                              r);
    });
    return out;
}
std::string Communicator::broadcast(const std::string& value, int root) const {
    std::uint64_t len = value.size();
    watched("MPI_Ibcast(length)",
            [&](MPI_Request* r) { return MPI_Ibcast(&len, 1, MPI_UINT64_T, root, comm_, r); });
    std::string out = rank_ == root ? value : std::string(len, '\0');
    // Pieces of at most 1 GiB: one MPI call never exceeds INT_MAX elements.
    constexpr std::uint64_t kPiece = 1u << 30;
    for (std::uint64_t at = 0; at < len; at += kPiece) {
        const int n = static_cast<int>(std::min(kPiece, len - at));
        watched("MPI_Ibcast(string)", [&](MPI_Request* r) {
            return MPI_Ibcast(out.data() + at, n, MPI_CHAR, root, comm_, r);
        });
    }
    return out;
}

LocalStatus LocalStatus::from_exception(const std::exception_ptr& ep) noexcept {
    LocalStatus s;
    if (!ep) return s;
    s.failed = true;
    try {
        std::rethrow_exception(ep);
    } catch (const Error& e) {
        s.kind = e.kind();
        s.message = e.what();
    } catch (const std::bad_alloc&) {
        s.message = kOutOfMemory;
    } catch (const std::exception& e) {
        s.message = e.what();
    } catch (...) {
        s.message = "unknown exception";
    }
    return s;
}

LocalStatus LocalStatus::from_current_exception() noexcept {
    return from_exception(std::current_exception());
}

namespace {

/// Every rank's part after an allreduce found that rank `first` is the lowest failing one:
/// counts the failing ranks, broadcasts the first one's error and throws it.
[[noreturn]] void throw_agreed(const Communicator& comm, const LocalStatus& status,
                               std::uint64_t first) {
    const std::uint64_t failing = comm.allreduce_sum(status.failed ? 1 : 0);
    const int root = static_cast<int>(first);
    std::string payload;
    if (comm.rank() == root) {
        payload = std::string(1, static_cast<char>(status.kind)) + status.message;
    }
    payload = comm.broadcast(payload, root);
    const auto kind = static_cast<ErrorKind>(payload.empty() ? 1 : payload[0]);
    std::string message = payload.size() > 1 ? payload.substr(1) : std::string("unknown error");
    // With one rank there is no other to tell apart: no "[rank 0] " prefix.
    std::string prefix;
    if (comm.size() > 1) {
        prefix = "[rank " + std::to_string(root);
        if (failing > 1) prefix += " and " + std::to_string(failing - 1) + " other rank(s)";
        prefix += "] ";
    }
    throw_error(kind, prefix + message);
}

}  // namespace

void throw_agreed_error(const Communicator& comm, const LocalStatus& status,
                        std::uint64_t first_rank) {
    throw_agreed(comm, status, first_rank);
}

void agree_or_throw(const Communicator& comm, const LocalStatus& status) {
    // One allreduce decides whether anyone failed and who is first; only then a broadcast.
    const std::uint64_t size = static_cast<std::uint64_t>(comm.size());
    const std::uint64_t mine = status.failed ? static_cast<std::uint64_t>(comm.rank()) : size;
    const std::uint64_t first = comm.allreduce_min(mine);
    if (first == size) return;
    throw_agreed(comm, status, first);
}

std::uint64_t agree_min_or_throw(const Communicator& comm, const LocalStatus& status,
                                 std::uint64_t value) {
    // One allreduce of one word: a failing rank sends its rank (< size), the others
    // size + value, so the minimum names the lowest failing rank or else carries min(value).
    const std::uint64_t size = static_cast<std::uint64_t>(comm.size());
    const std::uint64_t mine = status.failed ? static_cast<std::uint64_t>(comm.rank())
                                             : size + std::min<std::uint64_t>(value, ~std::uint64_t{0} - size);
    const std::uint64_t first = comm.allreduce_min(mine);
    if (first >= size) return first - size;
    throw_agreed(comm, status, first);
}

TaggedAgreement agree_tagged_or_throw(const Communicator& comm, std::uint64_t tag,
                                      const LocalStatus& status, std::uint64_t value, bool flag) {
    // One allreduce(min) of four words: the tag and its complement (min and max of the tag),
    // the status word of agree_min_or_throw, and the flag inverted (min = 0: some rank set it).
    const std::uint64_t size = static_cast<std::uint64_t>(comm.size());
    const std::uint64_t word =
        status.failed ? static_cast<std::uint64_t>(comm.rank())
                      : size + std::min<std::uint64_t>(value, ~std::uint64_t{0} - size);
    const std::vector<std::uint64_t> r =
        comm.allreduce_min(std::vector<std::uint64_t>{tag, ~tag, word, flag ? 0u : 1u});
    TaggedAgreement out;
    out.same_tag = r[0] == ~r[1];
    if (!out.same_tag) return out;  // the callers were not in the same call: no status counts
    if (r[2] < size) throw_agreed(comm, status, r[2]);
    out.min_value = r[2] - size;
    out.any_flag = r[3] == 0;
    return out;
}

void run_agreed(const Communicator& comm, const std::function<void()>& fn) {
    LocalStatus status = capture(fn);
    if (status.failed && status.message == kOutOfMemory) {
        // A bare std::bad_alloc says nothing of where: name the phase (and file) the rank was
        // in and how much it held.
        status.message += " on rank " + std::to_string(comm.rank()) + " during " +
                          (comm.context().phase.empty() ? std::string("an agreed step")
                                                        : comm.context().describe()) +
                          " (resident " + std::to_string(detail::resident_bytes()) + " bytes)";
    }
    agree_or_throw(comm, status);
}

}  // namespace mpistage
