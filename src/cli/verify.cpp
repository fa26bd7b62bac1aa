// The exactly-once check of `mpistage stage --verify`: every id is counted by the rank that
// owns its id range (one bit per id), so no rank holds more than O(N/W).
#include "cli/verify.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include "mpistage/error.hpp"
#include "util/memory_budget.hpp"

namespace mpistage::cli {

namespace {

/// Ids buffered between two exchanges, per rank: 1 Mi ids (8 MiB).
constexpr std::uint64_t kExchangeIds = std::uint64_t{1} << 20;

// Rank 0: the delivered content hashes against the snapshot's rows (multisets): a hash
// delivered more often than the snapshot holds it is a duplicate (a row twice, or a row the
// snapshot does not hold), one delivered less often is missing.
struct ContentVerdict {
    std::uint64_t duplicates = 0;
    std::uint64_t missing = 0;
};

ContentVerdict count_contents(std::vector<std::uint64_t> delivered,
                              const std::vector<std::uint64_t>& reference) {
    std::sort(delivered.begin(), delivered.end());
    ContentVerdict v;
    std::size_t i = 0;
    std::size_t k = 0;
    while (i < delivered.size() || k < reference.size()) {
        if (k == reference.size() || (i < delivered.size() && delivered[i] < reference[k])) {
            ++v.duplicates;
            ++i;
        } else if (i == delivered.size() || reference[k] < delivered[i]) {
            ++v.missing;
            ++k;
        } else {
            ++i;
            ++k;
        }
    }
    return v;
}

// Collective: the ids of every rank, concatenated in rank order on rank 0 (empty elsewhere).
std::vector<std::int64_t> gather_ids(const Communicator& comm, const std::vector<std::int64_t>& ids,
                                     const std::vector<std::uint64_t>& valid) {
    // `valid` is every rank's ids.size() (allgathered).
    std::uint64_t total = 0;
    for (std::uint64_t n : valid) total += n;
    // `valid` is allgathered, so every rank takes this branch or none.
    if (total > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
        throw ConfigError(
            "stage: --verify gathers the valid ids of an epoch on rank 0 and supports "
            "at most 2^31-1 of them; this epoch has " +
            std::to_string(total));
    }
    return comm.gatherv(ids, 0);
}

}  // namespace

int IdCount::owner_of(std::uint64_t id, std::uint64_t num_samples, int world_size) noexcept {
    // balanced_shard_begins: the first N mod W ranks own N/W + 1 ids, the others N/W.
    const auto w = static_cast<std::uint64_t>(world_size);
    const std::uint64_t q = num_samples / w;
    const std::uint64_t rem = num_samples % w;
    const std::uint64_t big = rem * (q + 1);
    if (id < big) return static_cast<int>(id / (q + 1));
    return static_cast<int>(rem + (id - big) / q);
}

IdCount::IdCount(const Communicator& comm, std::uint64_t num_samples, const std::string& input)
    : comm_(comm), num_samples_(num_samples), outgoing_(static_cast<std::size_t>(comm.size())) {
    comm.split_node();  // the node's share below; no MPI call when the caller made it
    const auto begins = balanced_shard_begins(num_samples, comm.size());
    const auto r = static_cast<std::size_t>(comm.rank());
    begin_ = begins[r];
    // The largest range (rank 0's) decides, so every rank of a node decides the same.
    const std::uint64_t owned = begins[1] - begins[0];
    const std::uint64_t words = owned / 64 + (owned % 64 != 0);
    const std::string what = "stage: --verify of " + input + " (" + std::to_string(num_samples) +
                             " samples, one bit per sample of each rank's id range of " +
                             std::to_string(owned) + ")";
    const std::string advice = "run without --verify or on more ranks";
    detail::check_memory_share(words * 8, comm.node_size(), what, advice);
    try {
        bits_.assign(static_cast<std::size_t>(begins[r + 1] - begins[r] + 63) / 64, 0);
    } catch (const std::bad_alloc&) {
        throw ConfigError(what + " could not allocate " + std::to_string(words * 8) +
                          " bytes on rank " + std::to_string(comm.rank()) + "; " + advice);
    }
}

void IdCount::add(std::int64_t id) {
    ++added_;
    if (id < 0 || static_cast<std::uint64_t>(id) >= num_samples_) {
        ++out_of_range_;
        return;
    }
    const auto u = static_cast<std::uint64_t>(id);
    std::string& out = outgoing_[static_cast<std::size_t>(owner_of(u, num_samples_, comm_.size()))];
    char bytes[sizeof u];
    std::memcpy(bytes, &u, sizeof u);
    out.append(bytes, sizeof u);
    ++buffered_;
}

void IdCount::exchange() {
    const std::vector<std::string> incoming = comm_.alltoallv(outgoing_);
    for (auto& o : outgoing_) o.clear();
    buffered_ = 0;
    for (const std::string& in : incoming) {
        for (std::size_t at = 0; at + sizeof(std::uint64_t) <= in.size();
             at += sizeof(std::uint64_t)) {
            std::uint64_t id = 0;
            std::memcpy(&id, in.data() + at, sizeof id);
            const std::uint64_t k = id - begin_;  // owned: the sender chose this rank
            std::uint64_t& word = bits_[static_cast<std::size_t>(k / 64)];
            const std::uint64_t bit = std::uint64_t{1} << (k % 64);
            if (word & bit) {
                ++duplicates_;
            } else {
                word |= bit;
                ++distinct_;
            }
        }
    }
}

std::uint64_t IdCount::memory_bytes() const noexcept {
    std::uint64_t bytes = bits_.capacity() * sizeof(std::uint64_t);
    for (const auto& o : outgoing_) bytes += o.capacity();
    return bytes;
}

std::uint64_t exchange_interval(std::uint64_t batch_slots) noexcept {
    return std::max<std::uint64_t>(1, kExchangeIds / std::max<std::uint64_t>(1, batch_slots));
}

EpochReport count_epoch(const Communicator& comm, std::uint64_t epoch, std::uint64_t batches) {
    EpochReport r;
    r.epoch = epoch;
    r.batches = comm.allgather(batches);
    return r;
}

std::vector<std::int64_t> gather_to_root(const Communicator& comm,
                                         const std::vector<std::int64_t>& ids) {
    return gather_ids(comm, ids, comm.allgather(static_cast<std::uint64_t>(ids.size())));
}

EpochReport verify_epoch(const Communicator& comm, std::uint64_t epoch, IdCount& count,
                         std::uint64_t batches, const Expectation& expect,
                         const std::vector<std::uint64_t>* hashes) {
    EpochReport r = count_epoch(comm, epoch, batches);
    r.valid = comm.allgather(count.added());
    r.expected = expect.expected;
    count.exchange();
    // The prior run's ids (rank 0 holds them, every rank knows how many): added in pieces of
    // kExchangeIds, one exchange each, so no rank buffers more than a piece.
    for (std::uint64_t done = 0; done < expect.prior_count; done += kExchangeIds) {
        const std::uint64_t end = std::min(expect.prior_count, done + kExchangeIds);
        if (comm.rank() == 0 && expect.prior) {
            for (std::uint64_t k = done; k < end && k < expect.prior->size(); ++k) {
                count.add((*expect.prior)[static_cast<std::size_t>(k)]);
            }
        }
        count.exchange();
    }
    const std::vector<std::uint64_t> mine{count.duplicates(), count.out_of_range(),
                                          count.distinct()};
    const std::vector<std::uint64_t> all = comm.allgather(mine);
    std::uint64_t unique = 0;
    for (std::size_t k = 0; k + 3 <= all.size(); k += 3) {
        r.duplicates += all[k];
        r.out_of_range += all[k + 1];
        unique += all[k + 2];
    }
    if (!expect.positions) {
        // Ids are not positions 0..N-1 (several sub-streams): identity by content only (below).
        r.duplicates = 0;
        r.out_of_range = 0;
        unique = r.expected;
    }
    r.missing = r.expected > unique ? r.expected - unique : 0;
    if (expect.content) {
        const std::vector<std::uint64_t> none;
        const std::vector<std::uint64_t> delivered = comm.gatherv(hashes ? *hashes : none, 0);
        ContentVerdict by_content;
        if (comm.rank() == 0) {
            by_content = count_contents(delivered, expect.reference ? *expect.reference : none);
            if (expect.partial) by_content.missing = 0;
        }
        const std::vector<std::uint64_t> verdict =
            comm.broadcast(std::vector<std::uint64_t>{by_content.duplicates, by_content.missing}, 0);
        r.duplicates = std::max(r.duplicates, verdict[0]);
        r.missing = std::max(r.missing, verdict[1]);
    }
    const bool equal_steps =
        std::all_of(r.batches.begin(), r.batches.end(), [&](auto b) { return b == r.batches[0]; });
    r.ok = equal_steps && r.duplicates == 0 && r.missing == 0 && r.out_of_range == 0 &&
           unique == r.expected;
    return r;
}

}  // namespace mpistage::cli
