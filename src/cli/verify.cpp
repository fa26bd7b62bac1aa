// The exactly-once check of `mpistage stage --verify`: rank 0 counts every gathered id.
#include "cli/verify.hpp"

#include <algorithm>
#include <limits>

#include "mpistage/error.hpp"

namespace mpistage::cli {

namespace {

struct Verdict {
    std::uint64_t duplicates = 0;
    std::uint64_t missing = 0;
    std::uint64_t out_of_range = 0;
    std::uint64_t unique = 0;
};

void count_one(std::int64_t id, std::uint64_t num_samples, std::vector<std::uint32_t>& seen,
               Verdict& v) {
    if (id < 0 || static_cast<std::uint64_t>(id) >= num_samples) {
        ++v.out_of_range;
        return;
    }
    if (++seen[static_cast<std::size_t>(id)] > 1) ++v.duplicates;
}

// Rank 0: counts each id of the epoch (this run's and the prior run's).
Verdict count_ids(const std::vector<std::int64_t>& all, const std::vector<std::int64_t>* prior,
                  std::uint64_t num_samples, std::uint64_t expected) {
    Verdict v;
    std::vector<std::uint32_t> seen(num_samples, 0);
    std::vector<std::int64_t> none;
    for (auto id : all) count_one(id, num_samples, seen, v);
    for (auto id : prior ? *prior : none) count_one(id, num_samples, seen, v);
    for (auto c : seen) v.unique += c > 0;
    v.missing = expected > v.unique ? expected - v.unique : 0;
    return v;
}

// Rank 0: the delivered content hashes against the snapshot's rows (multisets): a hash
// delivered more often than the snapshot holds it is a duplicate (a row twice, or a row the
// snapshot does not hold), one delivered less often is missing.
Verdict count_contents(std::vector<std::uint64_t> delivered,
                       const std::vector<std::uint64_t>& reference) {
    std::sort(delivered.begin(), delivered.end());
    Verdict v;
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

EpochReport verify_epoch(const Communicator& comm, std::uint64_t epoch,
                         const std::vector<std::int64_t>& ids, std::uint64_t batches,
                         const Expectation& expect, const std::vector<std::uint64_t>* hashes) {
    EpochReport r = count_epoch(comm, epoch, batches);
    r.valid = comm.allgather(static_cast<std::uint64_t>(ids.size()));
    r.expected = expect.expected;
    const std::vector<std::int64_t> all = gather_ids(comm, ids, r.valid);
    std::vector<std::uint64_t> delivered;
    const std::vector<std::uint64_t> none;
    if (expect.content) delivered = comm.gatherv(hashes ? *hashes : none, 0);
    Verdict v;
    Verdict by_content;
    if (comm.rank() == 0) {
        if (expect.positions) {
            v = count_ids(all, expect.prior, expect.num_samples, r.expected);
        } else {
            v.unique = r.expected;  // identity by content only (below)
        }
        if (expect.content) {
            by_content = count_contents(delivered, expect.reference ? *expect.reference : none);
            if (expect.partial) by_content.missing = 0;
        }
    }
    const std::vector<std::uint64_t> verdict =
        comm.broadcast(std::vector<std::uint64_t>{v.duplicates, v.missing, v.out_of_range, v.unique,
                                                  by_content.duplicates, by_content.missing},
                       0);
    r.duplicates = std::max(verdict[0], verdict[4]);
    r.missing = std::max(verdict[1], verdict[5]);
    r.out_of_range = verdict[2];
    const bool equal_steps =
        std::all_of(r.batches.begin(), r.batches.end(), [&](auto b) { return b == r.batches[0]; });
    r.ok = equal_steps && r.duplicates == 0 && r.missing == 0 && r.out_of_range == 0 &&
           verdict[3] == r.expected;
    return r;
}

}  // namespace mpistage::cli
