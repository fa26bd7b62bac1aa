// I/O threads the system refuses to start (RLIMIT_NPROC, memory; src/pipeline/prefetch.cpp,
// `Prefetcher::start`) are not an error: a rank reads with the threads that did start, or on the
// caller's thread with none, and yields the same batches, in the same order, as a rank whose
// threads all started, with no collective to agree on it, while its peers run with all their
// threads. The refusals come from `limit_io_thread_starts`, which fails starts as an
// RLIMIT_NPROC would (root, which runs CI, is exempt from the real limit).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "loader_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "pipeline/prefetch.hpp"

using namespace mpistage;
using namespace loader_test;

namespace {

constexpr std::uint64_t kEpochs = 2;

/// Collective: consumes epochs [0, kEpochs) of a loader built with `c`, checks each (exactly
/// once, equal steps, row data) and returns this rank's valid ids per epoch in batch order.
std::vector<std::vector<std::int64_t>> run(const Communicator& comm, const Source& src,
                                           const Config& c, const std::string& what) {
    const std::uint64_t n = h5t::kGeneratedRows;
    Loader loader(comm, src, c.options());
    BatchChecker chk{c.remainder, c.batch, n, generated_row_ok, nullptr, what};
    std::vector<std::vector<std::int64_t>> ids;
    for (std::uint64_t e = 0; e < kEpochs; ++e) {
        const auto o = consume_epoch(loader, e, chk, true);
        check_epoch_collectively(loader, o, c, n, what + " epoch " + std::to_string(e));
        ids.push_back(o.valid_ids);
    }
    EXPECT_EQ(h5t::sum(chk.problems), 0u) << what;
    return ids;
}

/// Lifts the limit of `limit_io_thread_starts` when it goes, however the test ends.
struct ThreadLimit {
    explicit ThreadLimit(std::size_t max_started) { detail::limit_io_thread_starts(max_started); }
    ~ThreadLimit() { detail::limit_io_thread_starts(SIZE_MAX); }
    ThreadLimit(const ThreadLimit&) = delete;
    ThreadLimit& operator=(const ThreadLimit&) = delete;
};

}  // namespace

// Rank r starts no I/O thread (r % 3 == 0), one of two (r % 3 == 1) or both (r % 3 == 2), on
// the file tier with a global and a local shuffle, and on the memory tier with every rank its
// own node (MPI_Get from the I/O threads).
TEST(LoaderIoThreads, RefusedThreadStartsLeaveTheSameBatches) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    const std::vector<Config> configs = {
        {16, Remainder::pad, Sharding::global, Shuffle::global, 3, 2},
        {5, Remainder::mask, Sharding::byte_range, Shuffle::local, 2, 2},
        {16, Remainder::drop, Sharding::global, Shuffle::global, 3, 2, Stage::memory, 1},
    };
    const int r = h5t::rank();
    const std::size_t limit = r % 3 == 0 ? 0 : r % 3 == 1 ? 1 : SIZE_MAX;
    for (const Config& c : configs) {
        const auto all_started = run(comm, src, c, c.str() + " all threads");
        const std::uint64_t refused_before = detail::refused_io_thread_starts();
        std::vector<std::vector<std::int64_t>> some_refused;
        {
            const ThreadLimit limited(limit);
            some_refused = run(comm, src, c, c.str() + " limited");
        }
        const std::uint64_t refused = detail::refused_io_thread_starts() - refused_before;
        // One refusal per epoch where the limit is below the 2 threads asked for. The memory
        // tier starts no I/O thread within one node (W = 1 here: its batches of under 1 MiB
        // are copied on the caller's thread).
        const bool starts_threads = c.stage == Stage::none || h5t::size() > 1;
        EXPECT_EQ(refused, starts_threads && limit < 2 ? kEpochs : 0u)
            << c.str() << ", limit " << limit;
        EXPECT_EQ(some_refused, all_started) << c.str() << ": the batches differ on rank " << r;
    }
    src.close();
    comm.free();
}
