// `stage --verify`'s exactly-once count (cli/verify.hpp, IdCount) is distributed by id range:
// each rank keeps one bit per id of its range (N/W/8 bytes, never O(N) on one rank), and the
// verdict (duplicates, out-of-range ids, distinct ids, missing ids) equals an independent
// count of every rank's ids gathered in the test.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <vector>

#include "cli/verify.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"

using namespace mpistage;
using mpistage::cli::IdCount;

namespace {

/// Rank r's ids: a stride over [0, n), repeats of ids other ranks also yield, and a few ids
/// outside [0, n).
std::vector<std::int64_t> ids_of(int rank, int w, std::uint64_t n) {
    std::vector<std::int64_t> ids;
    for (std::uint64_t id = static_cast<std::uint64_t>(rank); id < n; id += static_cast<std::uint64_t>(w)) {
        if (id % 97 != 13) ids.push_back(static_cast<std::int64_t>(id));  // some ids missing
    }
    for (std::uint64_t k = 0; k < 50; ++k) ids.push_back(static_cast<std::int64_t>((k * 7919) % n));
    ids.push_back(-1);
    ids.push_back(static_cast<std::int64_t>(n + static_cast<std::uint64_t>(rank)));
    return ids;
}

}  // namespace

TEST(VerifyCount, EqualsAnIndependentCount) {
    Communicator comm(MPI_COMM_WORLD);
    const int w = comm.size();
    for (const std::uint64_t n : {1ull, 5ull, 1000ull, 12345ull}) {
        const auto mine = ids_of(comm.rank(), w, n);
        // Rank 0 also holds a prior run's ids (an id log), which count with this run's.
        const std::vector<std::int64_t> prior = {0, 2, static_cast<std::int64_t>(n - 1)};
        IdCount count(comm, n, "test");
        // Exchanges at the same iterations on every rank (as the stage loop does per step).
        const std::uint64_t longest = h5t::max(mine.size());
        for (std::uint64_t k = 0; k < longest; ++k) {
            if (k < mine.size()) count.add(mine[k]);
            if (k % 1000 == 999) count.exchange();
        }
        // The test's own count over every rank's ids and the prior ones.
        auto all = h5t::allgatherv(mine);
        all.insert(all.end(), prior.begin(), prior.end());
        std::map<std::int64_t, std::uint64_t> seen;
        std::uint64_t out = 0;
        std::uint64_t dups = 0;
        for (const auto id : all) {
            if (id < 0 || static_cast<std::uint64_t>(id) >= n) {
                ++out;
            } else if (++seen[id] > 1) {
                ++dups;
            }
        }
        cli::Expectation x;
        x.num_samples = n;
        x.expected = n;
        x.prior = comm.rank() == 0 ? &prior : nullptr;
        x.prior_count = prior.size();
        const auto r = cli::verify_epoch(comm, 0, count, 1, x);
        EXPECT_EQ(r.duplicates, dups) << "N=" << n;
        EXPECT_EQ(r.out_of_range, out) << "N=" << n;
        EXPECT_EQ(r.missing, n - seen.size()) << "N=" << n;
        EXPECT_EQ(r.ok, dups == 0 && out == 0 && seen.size() == n);
        EXPECT_EQ(r.valid[static_cast<std::size_t>(comm.rank())], mine.size());
    }
    comm.free();
}

// The count's memory on a rank is one bit per id of its range (plus empty buffers), for a
// dataset of 10^9 samples: 125 MB / W, where gathering the ids on rank 0 took 12 B per id.
TEST(VerifyCount, MemoryIsOneBitPerOwnedId) {
    Communicator comm(MPI_COMM_WORLD);
    const std::uint64_t n = 1000000000ull;
    IdCount count(comm, n, "test");
    const auto begins = balanced_shard_begins(n, comm.size());
    const std::uint64_t owned = begins[static_cast<std::size_t>(comm.rank()) + 1] -
                                begins[static_cast<std::size_t>(comm.rank())];
    // + the W empty per-owner buffers (their small-string capacity).
    EXPECT_LE(count.memory_bytes(), owned / 8 + 8 + 64 * static_cast<std::uint64_t>(comm.size()));
    EXPECT_GE(count.memory_bytes(), owned / 8);
    // owner_of is the inverse of balanced_shard_begins, at every shard's ends.
    for (int q = 0; q < comm.size(); ++q) {
        const auto b = begins[static_cast<std::size_t>(q)];
        const auto e = begins[static_cast<std::size_t>(q) + 1];
        EXPECT_EQ(IdCount::owner_of(b, n, comm.size()), q);
        EXPECT_EQ(IdCount::owner_of(e - 1, n, comm.size()), q);
    }
    comm.free();
}
