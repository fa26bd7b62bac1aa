// The window agreement that does not wait on scheduling (docs/architecture.md, "Agreement that
// does not wait on scheduling"): window requests complete up to prefetch / 2 steps after they
// start (reading from the memory tier: the steps of 50 ms), so a rank that is delayed
// (descheduled, busy with its own work) holds the others back only when it is truly behind.
// Whatever the delays, every rank yields the same batches at the same steps as without them, every
// sample exactly once, and an agreed stop ends every rank at the same step, within the lag. The
// test finishing is the time bound.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "faulty_source.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/stop.hpp"
#include "tier/memory_tier.hpp"

using namespace mpistage;

namespace {

LoaderOptions opts(std::size_t prefetch, std::size_t threads, Stage stage) {
    LoaderOptions o;
    o.plan.batch_size = 2;
    o.plan.remainder = Remainder::mask;
    o.plan.shuffle = Shuffle::global;
    o.plan.sharding = Sharding::global;
    o.plan.seed = 7;
    o.pipeline.prefetch = prefetch;
    o.pipeline.io_threads = threads;
    o.delivery.pin_memory = false;
    o.tier.stage = stage;
    return o;
}

/// How long rank `rank` sleeps after batch `step`: the last rank often, rank 0 now and then
/// for longer, so each side is behind in turn (none on one rank: a sleep of its own).
std::chrono::microseconds delay_of(int rank, std::uint64_t step) {
    const int w = h5t::size();
    if (rank == w - 1 && step % 3 == 0) return std::chrono::microseconds(400);
    if (rank == 0 && step % 7 == 5) return std::chrono::microseconds(2000);
    return std::chrono::microseconds(0);
}

/// Collective: the valid ids of each batch this rank yields in epoch `e` (slot order).
std::vector<std::vector<std::int64_t>> consume(Loader& loader, std::uint64_t e, bool delayed) {
    std::vector<std::vector<std::int64_t>> steps;
    for (const HostBatch& b : loader.epoch(e)) {
        EXPECT_EQ(b.step(), steps.size());
        std::vector<std::int64_t> ids;
        for (std::size_t j = 0; j < b.size(); ++j) ids.push_back(b.valid()[j] ? b.index()[j] : -1);
        steps.push_back(std::move(ids));
        if (delayed) std::this_thread::sleep_for(delay_of(h5t::rank(), b.step()));
    }
    return steps;
}

/// Collective: every valid id yielded by every rank, sorted.
std::vector<std::int64_t> all_ids(const std::vector<std::vector<std::int64_t>>& steps) {
    std::vector<std::int64_t> mine;
    for (const auto& s : steps) {
        for (const std::int64_t id : s) {
            if (id >= 0) mine.push_back(id);
        }
    }
    const int w = h5t::size();
    int n = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(w));
    MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::vector<int> displs(static_cast<std::size_t>(w), 0);
    for (int r = 1; r < w; ++r) displs[r] = displs[r - 1] + counts[r - 1];
    std::vector<std::int64_t> all(static_cast<std::size_t>(displs[w - 1] + counts[w - 1]));
    MPI_Allgatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(),
                   MPI_INT64_T, MPI_COMM_WORLD);
    std::sort(all.begin(), all.end());
    return all;
}

/// Arms, on rank `fail_rank` only, a double failure of sample `id`: its read from the memory
/// tier fails (detail::fail_tier_reads_of) and so does the read from the file behind it
/// (FaultySource). Call after staging, before epoch() starts any I/O thread.
void arm_double_failure(loader_test::FaultySource& src, int fail_rank, std::uint64_t id) {
    if (h5t::rank() != fail_rank) return;
    detail::fail_tier_reads_of(id);
    src.set_trigger(static_cast<std::int64_t>(id));
}

/// Disarms `arm_double_failure` and returns the parts of the IoError every rank expects.
std::vector<std::string> disarm_double_failure(loader_test::FaultySource& src, int fail_rank) {
    detail::fail_tier_reads_of(~std::uint64_t{0});
    src.set_trigger(-1);
    std::vector<std::string> expected = {"injected read failure"};
    if (h5t::size() > 1) expected.push_back("[rank " + std::to_string(fail_rank) + "]");
    return expected;
}

}  // namespace

// Delays on both sides change nothing: the same ids at the same steps on every rank (compared
// with an undelayed run of the same epoch), every sample exactly once, from the file and from
// the memory tier, with lags 0 (prefetch 1) to 8 (prefetch 16).
TEST(LoaderLag, DelayedRanksYieldIdenticalBatchesAndSteps) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    for (const Stage stage : {Stage::none, Stage::memory}) {
        for (const std::size_t prefetch : {1, 4, 16}) {
            for (const std::size_t threads : {0, 1}) {
                const std::string what = "stage " + to_string(stage) + " prefetch " +
                                         std::to_string(prefetch) + " threads " +
                                         std::to_string(threads);
                Loader loader(comm, src, opts(prefetch, threads, stage));
                const auto plain = consume(loader, 0, false);
                const auto delayed = consume(loader, 0, true);
                EXPECT_EQ(plain, delayed) << what << ": rank " << h5t::rank();
                EXPECT_EQ(delayed.size(), loader.totals().steps) << what;
                EXPECT_TRUE(h5t::same_on_all_ranks(delayed.size())) << what;
                std::vector<std::int64_t> expected(loader.num_samples());
                for (std::size_t i = 0; i < expected.size(); ++i) {
                    expected[i] = static_cast<std::int64_t>(i);
                }
                EXPECT_EQ(all_ids(delayed), expected) << what << ": not exactly once";
            }
        }
    }
    src.close();
    comm.free();
}

// A stop asked on the last rank after its second batch, while rank 0 is delayed: every rank
// yields the same number of batches, at most 2 + prefetch (the request carrying the stop
// starts within prefetch - lag steps and takes effect lag steps later), and the next epoch is
// whole.
TEST(LoaderLag, StopWithRequestsInFlightEndsEveryRankAtTheSameStep) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    const int asking = h5t::size() - 1;
    for (const std::size_t prefetch : {2, 8, 16}) {
        const std::string what = "prefetch " + std::to_string(prefetch);
        Loader loader(comm, src, opts(prefetch, 0, Stage::none));
        std::uint64_t batches = 0;
        auto range = loader.epoch(0);
        for (const HostBatch& b : range) {
            ++batches;
            if (h5t::rank() == asking && batches == 2) range.request_stop();
            if (h5t::rank() == 0) std::this_thread::sleep_for(delay_of(0, b.step() + 5));
        }
        EXPECT_TRUE(range.stopped()) << what;
        EXPECT_GE(batches, 2u) << what;
        EXPECT_LE(batches, 2u + prefetch) << what;
        EXPECT_TRUE(h5t::same_on_all_ranks(batches)) << what << ": rank " << h5t::rank();
        EXPECT_EQ(loader.state().steps_consumed, batches) << what;
        const auto next = consume(loader, 1, true);
        EXPECT_EQ(next.size(), loader.totals().steps) << what;
    }
    src.close();
    comm.free();
}

// The same stop from the memory tier, whose reads are promised (the whole epoch credited, the
// lag set by the agreed step time, 50 ms of steps): every rank yields the same number of
// batches, before the epoch's end, the state points there, and the next epoch is whole. A stop
// asked too late for that (an epoch shorter than the lag) ends the epoch whole, stopped.
TEST(LoaderLag, StopWithPromisedReadsEndsEveryRankAtTheSameStep) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    const int asking = h5t::size() - 1;
    for (const std::size_t prefetch : {1, 4, 16}) {
        for (const std::size_t threads : {0, 1}) {
            const std::string what =
                "prefetch " + std::to_string(prefetch) + " threads " + std::to_string(threads);
            Loader loader(comm, src, opts(prefetch, threads, Stage::memory));
            ASSERT_EQ(loader.stats().tier, "memory");
            // Steps of a trainer's compute, 200 ms per epoch: the lag (50 ms of steps) is a
            // quarter of the epoch, and the step time agreed in epoch 0 carries into epoch 1.
            const auto step = std::chrono::microseconds(200'000 / loader.totals().steps);
            for (const HostBatch& b : loader.epoch(0)) {
                (void)b;
                std::this_thread::sleep_for(step);
            }
            std::uint64_t batches = 0;
            auto range = loader.epoch(1);
            for (const HostBatch& b : range) {
                ++batches;
                if (h5t::rank() == asking && batches == 2) range.request_stop();
                std::this_thread::sleep_for(step + delay_of(0, b.step() + 5));
            }
            EXPECT_TRUE(range.stopped()) << what;
            EXPECT_GE(batches, 2u) << what;
            EXPECT_LT(batches, loader.totals().steps) << what << ": the stop took effect mid-epoch";
            EXPECT_TRUE(h5t::same_on_all_ranks(batches)) << what << ": rank " << h5t::rank();
            EXPECT_EQ(loader.state().steps_consumed, batches) << what;
            const auto next = consume(loader, 2, true);
            EXPECT_EQ(next.size(), loader.totals().steps) << what;
        }
    }
    src.close();
    comm.free();
}

// A read from the memory tier that fails (injected: detail::fail_tier_reads_of) is made again
// from the file behind it, so the promise holds: the same batches at the same steps as an
// undisturbed epoch, every sample exactly once, no error.
TEST(LoaderLag, FailedTierReadIsReadFromTheFile) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    const int w = h5t::size();
    for (const std::size_t threads : {0, 1}) {
        const auto o = opts(4, threads, Stage::memory);
        Loader loader(comm, src, o);
        ASSERT_EQ(loader.stats().tier, "memory");
        const auto plain = consume(loader, 0, false);
        const EpochPlan plan = plan_epoch(src.num_samples(), w, w - 1, o.plan, 0);
        if (h5t::rank() == w - 1) detail::fail_tier_reads_of(plan.ids[2 * o.plan.batch_size]);
        const auto again = consume(loader, 0, true);
        detail::fail_tier_reads_of(~std::uint64_t{0});
        EXPECT_EQ(again, plain) << "threads " << threads << ": rank " << h5t::rank();
        EXPECT_EQ(all_ids(again).size(), loader.num_samples()) << "threads " << threads;
    }
    src.close();
    comm.free();
}

// A step whose tier read fails and whose read from the file fails too (FaultySource) is agreed
// later than its step: the failing rank yields the batches before it and takes part in the
// protocol of the following steps, the others run on to the step where the request reporting
// it is due, and every rank throws the same IoError naming the failing rank. The loader then
// serves a whole epoch.
TEST(LoaderLag, PromisedReadFailureIsTheSameErrorOnEveryRank) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source inner(comm, files.generated_contiguous);
    loader_test::FaultySource src(inner);
    const int w = h5t::size();
    struct Case {
        int fail_rank;
        std::uint64_t fail_step;
        std::size_t prefetch;
        std::size_t threads;
        bool delayed;
    };
    const std::vector<Case> cases = {{w - 1, 0, 4, 0, false},
                                     {w - 1, 3, 4, 1, true},
                                     {0, 5, 1, 0, true},
                                     {w / 2, 2, 16, 1, false},
                                     {0, 1, 16, 0, true}};
    for (const auto& cs : cases) {
        const auto o = opts(cs.prefetch, cs.threads, Stage::memory);
        const EpochPlan plan = plan_epoch(src.num_samples(), w, cs.fail_rank, o.plan, 0);
        ASSERT_GT(plan.steps, cs.fail_step + 1);
        const std::string what = "fail rank " + std::to_string(cs.fail_rank) + " step " +
                                 std::to_string(cs.fail_step) + " prefetch " +
                                 std::to_string(cs.prefetch) + " threads " +
                                 std::to_string(cs.threads) + (cs.delayed ? " delayed" : "");
        Loader loader(comm, src, o);
        ASSERT_EQ(loader.stats().tier, "memory");
        arm_double_failure(src, cs.fail_rank, plan.ids[cs.fail_step * o.plan.batch_size]);
        std::uint64_t good = 0;
        const auto out = h5t::catch_error<IoError>([&] {
            auto range = loader.epoch(0);
            HostBatch b;
            while (range.next(b)) {
                ++good;
                if (cs.delayed) std::this_thread::sleep_for(delay_of(h5t::rank(), b.step()));
            }
        });
        h5t::expect_same_error(out, "IoError", disarm_double_failure(src, cs.fail_rank));
        if (h5t::rank() == cs.fail_rank) {
            EXPECT_EQ(good, cs.fail_step) << what << ": the failing rank's batches";
        }
        // The others agree among themselves, at or after the failed step.
        const bool peer = h5t::rank() != cs.fail_rank;
        std::uint64_t lo = peer ? good : ~std::uint64_t{0};
        std::uint64_t hi = peer ? good : 0;
        MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        if (w > 1) {
            EXPECT_EQ(lo, hi) << what << ": the other ranks' batches differ";
            EXPECT_GE(lo, cs.fail_step) << what;
        }
        const auto next = consume(loader, 1, false);
        EXPECT_EQ(next.size(), loader.totals().steps) << what;
        EXPECT_EQ(all_ids(next).size(), loader.num_samples()) << what << ": not exactly once";
    }
    {
        // A stop asked after the last request started: the epoch ends whole and stopped.
        Loader loader(comm, src, opts(4, 0, Stage::memory));
        std::uint64_t batches = 0;
        auto range = loader.epoch(0);
        for (const HostBatch& b : range) {
            ++batches;
            if (h5t::rank() == 0 && b.step() + 1 == loader.totals().steps) range.request_stop();
        }
        EXPECT_EQ(batches, loader.totals().steps);
        EXPECT_TRUE(range.stopped());
        EXPECT_TRUE(h5t::same_on_all_ranks(batches));
    }
    inner.close();
    comm.free();
}

// The same double failure (tier and file) when the other ranks' loop breaks early, before the
// failure is due, and they close the loader (or start the next epoch): the failing rank still
// runs the protocol towards the due step, so the ranks meet in different calls; every rank
// then throws the failed read's IoError (from `close()` / `epoch()` on the others, from `next()`
// on the failing rank), not the ConfigError of ranks in different calls.
TEST(LoaderLag, PromisedReadFailureThenAnEarlyBreakIsTheIoError) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source inner(comm, files.generated_contiguous);
    loader_test::FaultySource src(inner);
    const int w = h5t::size();
    const int fail_rank = w - 1;
    const std::uint64_t fail_step = 1;
    for (const bool then_close : {true, false}) {
        const auto o = opts(4, 0, Stage::memory);
        Loader loader(comm, src, o);
        ASSERT_EQ(loader.stats().tier, "memory");
        const EpochPlan plan = plan_epoch(src.num_samples(), w, fail_rank, o.plan, 0);
        ASSERT_GT(plan.steps, fail_step + 2);
        arm_double_failure(src, fail_rank, plan.ids[fail_step * o.plan.batch_size]);
        std::uint64_t good = 0;
        const auto out = h5t::catch_error<IoError>([&] {
            {
                auto range = loader.epoch(0);
                HostBatch b;
                while (range.next(b)) {
                    if (++good == fail_step + 1) break;  // the others break here
                }
            }
            if (then_close) {
                loader.close();
            } else {
                (void)loader.epoch(1);
            }
        });
        h5t::expect_same_error(out, "IoError", disarm_double_failure(src, fail_rank));
        if (h5t::rank() == fail_rank) EXPECT_EQ(good, fail_step);
    }
    inner.close();
    comm.free();
}
