// The loader's tagged agreements after construction: the blocking ones (epoch start, close,
// two-phase exchange) and the window requests that complete steps later; when ranks are found
// in different calls, the one way every rank reports it.
#include "comm/agree.hpp"
#include "loader/loader_impl.hpp"

namespace mpistage {

namespace {

/// The tag of the rounds that bring every rank to the same collective after a mismatch.
constexpr std::uint64_t kAlignTag = 0x616c69676e6d7073ULL;  // "alignmps"

}  // namespace

TaggedAgreement Loader::Impl::sync(const detail::SyncTag& tag, const LocalStatus& status,
                                   std::uint64_t value, bool stop) {
    // Window requests still in flight (a range left early) come first: every rank started
    // them before this call, or finds here that it is in another one.
    finish_windows(tag);
    const TaggedAgreement a = agree_tagged_or_throw(comm, tag.hash(), status, value, stop);
    if (a.same_tag) return a;
    resolve_mismatch(tag);
}

void Loader::Impl::resolve_mismatch(const detail::SyncTag& tag) {
    // This rank's own requests in flight are matched by the others' calls (whatever those
    // are: each is a four-word tagged allreduce); their outcome no longer counts.
    for (detail::WindowRequest& r : windows.pending) (void)r.request.wait();
    windows.pending.clear();
    windows.mismatch = false;
    // Ranks may have completed different requests: no agreed step time carries over.
    windows.timings.clear();
    windows.step_ns = 0;
    // A rank may have started more requests than another before it saw the mismatch: rounds
    // of the same shape until one in which every rank took part as a round. Every rank sees
    // the same result of each round, so all leave at the same one.
    comm.set_context({"loader: ranks in different calls", -1, -1, "", -1});
    for (;;) {
        const std::vector<std::uint64_t> r =
            comm.allreduce_min(std::vector<std::uint64_t>{kAlignTag, ~kAlignTag, 0, 1});
        if (r[0] == kAlignTag && r[1] == ~kAlignTag) break;
    }
    const std::vector<std::uint64_t> all = comm.allgather(tag.words());
    std::vector<detail::SyncTag> tags;
    for (std::size_t at = 0; at + detail::SyncTag::kWords <= all.size();
         at += detail::SyncTag::kWords) {
        tags.push_back(detail::SyncTag::from_words(&all[at]));
        peer_closed = peer_closed || tags.back().kind == detail::SyncKind::close;
    }
    diverged = true;
    divergence = detail::describe_mismatch(tags);
    // A promised read that failed is why the ranks parted: its error is the one to report.
    const std::uint64_t size = static_cast<std::uint64_t>(comm.size());
    const std::uint64_t first =
        comm.allreduce_min(failed_read.failed ? static_cast<std::uint64_t>(comm.rank()) : size);
    if (first < size) throw_agreed_error(comm, failed_read, first);
    throw ConfigError(divergence);
}

void Loader::Impl::start_window(const detail::SyncTag& tag, std::uint64_t step,
                                const detail::WindowReport& report, std::uint64_t limit,
                                bool regular) {
    detail::WindowRequest r;
    r.step = step;
    std::uint64_t group = 1;
    windows.shape_at(step, limit, r.lag, group);
    if (regular) windows.next_start = step + group;
    r.request = detail::PendingAllreduce(
        comm, detail::window_words(tag.hash(), report, comm.rank(), comm.size()),
        "MPI_Iallreduce(window agreement)");
    windows.pending.push_back(std::move(r));
    windows.last_start = step;
}

void Loader::Impl::poll_windows(const detail::SyncTag& tag) {
    while (!windows.pending.empty() && windows.pending.front().request.test()) {
        if (!windows.absorb_front(comm.size())) resolve_mismatch(tag);
    }
}

void Loader::Impl::wait_window(const detail::SyncTag& tag) {
    (void)windows.pending.front().request.wait();
    if (!windows.absorb_front(comm.size())) resolve_mismatch(tag);
}

void Loader::Impl::finish_windows(const detail::SyncTag& tag) {
    while (!windows.pending.empty()) wait_window(tag);
}

}  // namespace mpistage
