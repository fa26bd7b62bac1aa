// Ending an epoch early: the collective ways (EpochOptions::max_steps, EpochRange::request_stop,
// mpistage::request_stop) end it at the same step on every rank and the next epoch is whole,
// exactly once; ranks that leave an epoch at different steps (a `break` at each rank's own
// step) and then start the next epoch, close or destroy the loader get the same ConfigError
// naming ranks and steps: no crash, no hang. The test finishing is the time bound.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

using namespace mpistage;

namespace {

LoaderOptions opts(std::size_t prefetch, std::size_t threads, bool two_phase = false) {
    LoaderOptions o;
    o.plan.batch_size = 4;
    o.plan.remainder = Remainder::mask;
    o.plan.shuffle = Shuffle::global;
    o.plan.sharding = Sharding::global;
    o.plan.seed = 99;
    o.pipeline.prefetch = prefetch;
    o.pipeline.io_threads = threads;
    o.delivery.pin_memory = false;
    o.pipeline.two_phase = two_phase ? TwoPhase::on : TwoPhase::off;
    return o;
}

/// The prefetch/thread/two-phase variants every property is checked under.
std::vector<LoaderOptions> variants() {
    return {opts(1, 0), opts(3, 1), opts(2, 0, true)};
}

/// Collective: every rank's valid ids, on every rank.
std::vector<std::int64_t> gather_ids(const std::vector<std::int64_t>& mine) {
    const int w = h5t::size();
    int n = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(w));
    MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::vector<int> displs(static_cast<std::size_t>(w), 0);
    for (int r = 1; r < w; ++r) displs[r] = displs[r - 1] + counts[r - 1];
    std::vector<std::int64_t> all(static_cast<std::size_t>(displs[w - 1] + counts[w - 1]));
    MPI_Allgatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(),
                   MPI_INT64_T, MPI_COMM_WORLD);
    return all;
}

void add_ids(const HostBatch& b, std::vector<std::int64_t>& ids) {
    for (std::size_t j = 0; j < b.size(); ++j) {
        if (b.valid()[j]) ids.push_back(b.index()[j]);
    }
}

/// Collective: consumes epoch `e` to its end; expects every sample exactly once over ranks.
void expect_whole_epoch(Loader& loader, std::uint64_t e, const std::string& what) {
    std::vector<std::int64_t> ids;
    std::uint64_t batches = 0;
    const auto o = h5t::catch_error<ConfigError>([&] {
        for (const HostBatch& b : loader.epoch(e)) {
            ++batches;
            add_ids(b, ids);
        }
    });
    EXPECT_FALSE(o.threw) << what << ": epoch " << e << ": " << o.message;
    EXPECT_EQ(batches, loader.totals().steps) << what << ": epoch " << e;
    std::vector<std::int64_t> all = gather_ids(ids);
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> expected(loader.num_samples());
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<std::int64_t>(i);
    EXPECT_EQ(all, expected) << what << ": epoch " << e << " is not every sample exactly once";
}

}  // namespace

// EpochOptions::max_steps ends the epoch at that step on every rank; the state points there
// (so a continuation resumes at it) and the next epoch is whole.
TEST(LoaderEarlyExit, MaxStepsEndsTheEpochAtTheSameStepAndTheNextIsWhole) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    for (const LoaderOptions& o : variants()) {
        const std::string what = "prefetch " + std::to_string(o.pipeline.prefetch) + " two_phase " +
                                 to_string(o.pipeline.two_phase);
        Loader loader(comm, src, o);
        EpochOptions eo;
        eo.max_steps = 3;
        std::uint64_t batches = 0;
        auto range = loader.epoch(0, eo);
        EXPECT_EQ(range.steps(), 3u) << what;
        for (const HostBatch& b : range) {
            EXPECT_EQ(b.step(), batches) << what;
            ++batches;
        }
        EXPECT_EQ(batches, 3u) << what;
        EXPECT_FALSE(range.stopped()) << what;
        const LoaderState s = loader.state();
        EXPECT_EQ(s.epoch, 0u) << what;
        EXPECT_EQ(s.steps_consumed, 3u) << what;
        EXPECT_EQ(s.samples_consumed, 3u * 4u * static_cast<std::uint64_t>(h5t::size())) << what;
        expect_whole_epoch(loader, 1, what);
        loader.close();
    }
    src.close();
    comm.free();
}

// A stop requested on one rank only (EpochRange::request_stop, then mpistage::request_stop)
// is agreed: every rank yields the same number of batches, `stopped()` is true everywhere, and
// the next epoch is whole, exactly once.
TEST(LoaderEarlyExit, StopRequestedOnOneRankEndsEveryRankAtTheSameStep) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    const int asking = h5t::size() - 1;
    for (const LoaderOptions& o : variants()) {
        for (const bool process_wide : {false, true}) {
            const std::string what = "prefetch " + std::to_string(o.pipeline.prefetch) +
                                     " two_phase " + to_string(o.pipeline.two_phase) +
                                     " process-wide " + std::to_string(process_wide);
            Loader loader(comm, src, o);
            std::uint64_t batches = 0;
            auto range = loader.epoch(0);
            for (const HostBatch& b : range) {
                (void)b;
                ++batches;
                if (h5t::rank() == asking && batches == 2) {
                    if (process_wide) {
                        request_stop();
                        EXPECT_TRUE(stop_requested());
                    } else {
                        range.request_stop();
                    }
                }
            }
            if (process_wide && h5t::rank() == asking) clear_stop_request();
            EXPECT_TRUE(range.stopped()) << what;
            EXPECT_GE(batches, 2u) << what;
            // At the next window: the asking rank's current window holds at most `prefetch`
            // batches (a count, not a time).
            EXPECT_LE(batches, 2u + o.pipeline.prefetch) << what;
            EXPECT_LT(batches, range.steps()) << what;
            EXPECT_TRUE(h5t::same_on_all_ranks(batches))
                << what << ": rank " << h5t::rank() << " yielded " << batches;
            EXPECT_EQ(loader.state().steps_consumed, batches) << what;
            expect_whole_epoch(loader, 1, what);
        }
    }
    src.close();
    comm.free();
}

// Rank r breaks after r + 1 batches, then starts the next epoch: every rank gets the same
// ConfigError naming the ranks and steps (from epoch() or from next(), wherever it is); the
// state is refused until the next epoch, which is whole.
TEST(LoaderEarlyExit, BreakAtDifferentStepsThenNextEpochIsTheSameConfigError) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    if (h5t::size() < 2) GTEST_SKIP() << "needs peers";  // equal on every rank
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    for (const LoaderOptions& o : variants()) {
        const std::string what = "prefetch " + std::to_string(o.pipeline.prefetch) + " two_phase " +
                                 to_string(o.pipeline.two_phase);
        Loader loader(comm, src, o);
        const auto mine = static_cast<std::uint64_t>(h5t::rank() + 1);
        const auto out = h5t::catch_error<ConfigError>([&] {
            std::uint64_t n = 0;
            for (const HostBatch& b : loader.epoch(0)) {
                (void)b;
                if (++n == mine) break;
            }
            auto next = loader.epoch(1);
        });
        SCOPED_TRACE(what);
        h5t::expect_same_error(out, "ConfigError", {"rank 0", "epoch 0", "step 1"});
        EXPECT_THROW((void)loader.state(), ConfigError) << what;
        expect_whole_epoch(loader, 2, what);
    }
    src.close();
    comm.free();
}

// Rank r breaks after r + 1 batches, then closes the loader: the same ConfigError everywhere
// (close() on the ranks that got there, next() on the others); destroying it then is quiet.
TEST(LoaderEarlyExit, BreakAtDifferentStepsThenCloseIsTheSameConfigError) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    if (h5t::size() < 2) GTEST_SKIP() << "needs peers";  // equal on every rank
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    for (const LoaderOptions& o : variants()) {
        SCOPED_TRACE("prefetch " + std::to_string(o.pipeline.prefetch) + " two_phase " +
                     to_string(o.pipeline.two_phase));
        Loader loader(comm, src, o);
        const auto mine = static_cast<std::uint64_t>(h5t::rank() + 1);
        const auto out = h5t::catch_error<ConfigError>([&] {
            std::uint64_t n = 0;
            for (const HostBatch& b : loader.epoch(0)) {
                (void)b;
                if (++n == mine) break;
            }
            loader.close();
        });
        h5t::expect_same_error(out, "ConfigError",
                               {"rank 0: ", "step 1", "closing (destroying) the loader"});
        EXPECT_THROW((void)loader.epoch(1), ConfigError);  // local: the loader is closed
    }
    src.close();
    comm.free();
}

// Rank 0 breaks after one batch and destroys its loader (the trainer's scope ends) while the
// other ranks still iterate the epoch: they get the same ConfigError naming rank 0 and its
// step from next() (rank 0's destructor prints it); nobody crashes or hangs.
TEST(LoaderEarlyExit, BreakThenDestroyTheLoaderWhileOthersIterate) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    if (h5t::size() < 2) GTEST_SKIP() << "needs peers";  // equal on every rank
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    for (const LoaderOptions& o : variants()) {
        SCOPED_TRACE("prefetch " + std::to_string(o.pipeline.prefetch) + " two_phase " +
                     to_string(o.pipeline.two_phase));
        h5t::Outcome out;
        std::uint64_t batches = 0;
        {
            Loader loader(comm, src, o);
            out = h5t::catch_error<ConfigError>([&] {
                for (const HostBatch& b : loader.epoch(0)) {
                    (void)b;
                    ++batches;
                    if (h5t::rank() == 0) break;
                }
            });
        }
        if (h5t::rank() == 0) {
            EXPECT_FALSE(out.threw) << out.message;
            EXPECT_EQ(batches, 1u);
        } else {
            EXPECT_TRUE(out.right_type) << out.message;
            EXPECT_NE(out.message.find("rank 0: closing (destroying) the loader after leaving "
                                       "epoch 0 at step 1"),
                      std::string::npos)
                << out.message;
        }
        // The ranks that threw agree among themselves (rank 0 has no exception to compare).
        const std::uint64_t h = h5t::fnv(out.message);
        const std::uint64_t lo = h5t::min(h5t::rank() == 0 ? ~std::uint64_t{0} : h);
        const std::uint64_t hi = h5t::max(h5t::rank() == 0 ? 0 : h);
        EXPECT_EQ(lo, hi) << "rank " << h5t::rank() << ": " << out.message;
    }
    src.close();
    comm.free();
}
