// Collective safety of the Loader (DESIGN.md §1, BUGS H5): an I/O error on one rank, options
// that differ between ranks, and a caller holding every prefetch slot all become the same
// exception on every rank instead of a hang. The test finishing is the time bound.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "../hdf5_test_util.hpp"
#include "faulty_source.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

using namespace mpistage;

namespace {

using loader_test::FaultySource;

LoaderOptions opts(std::uint64_t b, Remainder rem, std::size_t prefetch, std::size_t threads) {
    LoaderOptions o;
    o.plan.batch_size = b;
    o.plan.remainder = rem;
    o.pipeline.prefetch = prefetch;
    o.pipeline.io_threads = threads;
    o.delivery.pin_memory = false;
    return o;
}

/// Consumes an epoch to the end; returns the number of batches. Collective.
std::uint64_t drain(Loader& loader, std::uint64_t epoch, std::string* error) {
    std::uint64_t batches = 0;
    try {
        auto range = loader.epoch(epoch);
        HostBatch b;
        while (range.next(b)) ++batches;
    } catch (const std::exception& e) {
        if (error) *error = e.what();
    }
    return batches;
}

}  // namespace

// BUGS H5: a read error on one rank at step S reaches every rank as the same IoError from
// EpochRange::next at step S; the loader then runs a clean epoch.
TEST(LoaderSafety, ReadErrorOnOneRankBecomesSameIoErrorEverywhere) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source inner(comm, files.generated_contiguous);
    Hdf5Source inner_chunked(comm, files.generated_chunked);
    const int w = h5t::size();
    struct Case {
        int fail_rank;
        std::uint64_t fail_step;
        std::size_t prefetch;
        std::size_t threads;
        bool chunked;
        /// Microseconds every rank but the failing one sleeps after each batch (a peer that
        /// is descheduled or busy: the window requests then complete steps later).
        int delay_us = 0;
    };
    const std::vector<Case> cases = {
        {w - 1, 2, 1, 0, false},
        {w - 1, 2, 3, 1, false},
        {w - 1, 2, 2, 2, false},
        {0, 0, 2, 1, false},
        {w - 1, 2, 3, 2, true},
        {w / 2, 1, 1, 1, true},
        // Windows of up to 4 ready batches per agreement: the error still surfaces at its step.
        {w - 1, 3, 4, 1, false},
        {0, 3, 4, 0, true},
        {w / 2, 2, 4, 2, false},
        // Deep rings: window requests in flight for up to prefetch / 2 steps, peers delayed.
        {w - 1, 2, 8, 0, false, 300},
        {0, 6, 16, 0, false, 200},
        {w - 1, 5, 12, 1, true, 300},
    };
    for (const auto& cs : cases) {
        const Source& base = cs.chunked ? static_cast<const Source&>(inner_chunked) : inner;
        FaultySource src(base);
        const auto o = opts(5, Remainder::drop, cs.prefetch, cs.threads);
        // The failing sample: the first slot of step fail_step in the failing rank's plan
        // (computed before the loader exists, so background threads can never miss it).
        const EpochPlan plan = plan_epoch(src.num_samples(), w, cs.fail_rank, o.plan, 0);
        ASSERT_GT(plan.steps, cs.fail_step + 1);  // same on every rank
        const std::string what = "fail rank " + std::to_string(cs.fail_rank) + " step " +
                                 std::to_string(cs.fail_step) + " prefetch " +
                                 std::to_string(cs.prefetch) + " io_threads " +
                                 std::to_string(cs.threads) + (cs.chunked ? " chunked" : "") +
                                 " delay " + std::to_string(cs.delay_us) + " us";
        Loader loader(comm, src, o);
        // Armed after construction (which reads samples 0, N/2, N-1 once for the content
        // fingerprint) and before epoch() starts any I/O thread.
        if (h5t::rank() == cs.fail_rank) src.set_trigger(plan.ids[cs.fail_step * 5]);
        std::uint64_t good = 0;
        std::uint64_t error_step = ~0ull;
        const auto out = h5t::catch_error<IoError>([&] {
            auto range = loader.epoch(0);
            HostBatch b;
            while (range.next(b)) {
                ++good;
                if (cs.delay_us > 0 && h5t::rank() != cs.fail_rank) {
                    std::this_thread::sleep_for(std::chrono::microseconds(cs.delay_us));
                }
            }
            // Reaching here means no error surfaced on this rank.
        });
        error_step = good;
        h5t::expect_same_error(
            out, "IoError",
            {"injected read failure", "[rank " + std::to_string(cs.fail_rank) + "]"});
        EXPECT_EQ(error_step, cs.fail_step) << what << ": batches before the error";
        EXPECT_TRUE(h5t::same_on_all_ranks(error_step)) << what;
        // After the agreed error the loader is usable: a clean epoch, exactly once.
        src.set_trigger(-1);
        std::string error;
        const auto batches = drain(loader, 1, &error);
        EXPECT_EQ(error, "") << what;
        EXPECT_EQ(batches, loader.totals().steps) << what;
        EXPECT_TRUE(h5t::same_on_all_ranks(batches)) << what;
    }
    inner_chunked.close();
    inner.close();
    comm.free();
}

// Plan options that differ on one rank: the same ConfigError on every rank at construction.
TEST(LoaderSafety, DifferingOptionsAreSameConfigErrorAtConstruction) {
    if (h5t::size() < 2) GTEST_SKIP() << "needs two ranks for options to differ";
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    const bool odd = h5t::rank() == h5t::size() - 1;
    {
        auto o = opts(odd ? 9 : 8, Remainder::pad, 2, 1);
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, o), "batch_size", "8", "9");
    }
    {
        auto o = opts(8, odd ? Remainder::mask : Remainder::drop, 2, 1);
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, o), "remainder");
    }
    {
        auto o = opts(8, Remainder::drop, 2, 1);
        o.plan.seed = odd ? 7 : 0;
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, o), "seed");
    }
    {
        // An invalid option on one rank only (batch size 0): agreed before anything else.
        auto o = opts(odd ? 0 : 8, Remainder::drop, 2, 1);
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, o), "batch");
    }
    {
        // A different dataset on one rank (same shapes, different layout): fingerprints differ.
        // Opened per rank (MPI_COMM_SELF), past the source's own identity check, so the
        // loader's check is what is tested; the next block tests the source's check.
        Communicator self(MPI_COMM_SELF);
        Hdf5Source other(self, odd ? files.generated_chunked : files.generated_contiguous);
        auto o = opts(8, Remainder::drop, 2, 1);
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, other, o), "fingerprint");
        other.close();
        self.free();
    }
    {
        // The same on the world communicator: the source itself refuses to open different
        // files on different ranks, before its collective H5Fopen.
        const std::string path = odd ? files.generated_chunked : files.generated_contiguous;
        if (comm.size() > 1) {
            H5T_EXPECT_SAME_ERROR(ConfigError, Hdf5Source(comm, path), "hdf5: ranks disagree",
                                  "same, unchanging file");
        }
    }
    src.close();
    comm.free();
}

// A prefetch ring larger than this rank's share of the node's memory (half of it divided
// among the node's ranks) is refused before anything is allocated, with the same ConfigError
// naming the ring's size on every rank, not std::bad_alloc or the OOM killer.
TEST(LoaderSafety, PrefetchRingBeyondTheNodeMemoryIsConfigError) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    auto o = opts(std::uint64_t{1} << 40, Remainder::pad, 4, 1);  // >= 1 TiB a slot
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, o), "loader: the prefetch ring",
                          "more than its share of this node's memory",
                          "lower the batch size or prefetch depth");
    src.close();
    comm.free();
}

// prefetch and io_threads may differ between ranks; the sequence stays exactly once.
TEST(LoaderSafety, PrefetchAndThreadsMayDifferAcrossRanks) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    const auto r = static_cast<std::size_t>(h5t::rank());
    auto o = opts(6, Remainder::mask, 1 + r % 3, r % 3);
    Loader loader(comm, src, o);
    std::vector<std::int64_t> ids;
    std::uint64_t batches = 0;
    std::string error;
    try {
        auto range = loader.epoch(0);
        HostBatch b;
        while (range.next(b)) {
            for (std::size_t s = 0; s < b.size(); ++s) {
                if (b.valid()[s]) ids.push_back(b.index()[s]);
            }
            ++batches;
        }
    } catch (const std::exception& e) {
        error = e.what();
    }
    EXPECT_EQ(error, "");
    EXPECT_TRUE(h5t::same_on_all_ranks(batches));
    const auto all = h5t::allgatherv(ids);
    EXPECT_EQ(all.size(), h5t::kGeneratedRows);
    EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), h5t::kGeneratedRows);
    src.close();
    comm.free();
}

// A caller holding every prefetch slot gets a ConfigError on every rank, not a hang; releasing
// the batches lets the next epoch run.
TEST(LoaderSafety, HoldingAllPrefetchSlotsIsConfigErrorNotHang) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    for (std::size_t prefetch = 1; prefetch <= 2; ++prefetch) {
        for (std::size_t threads = 0; threads <= 2; ++threads) {
            const std::string what =
                "prefetch " + std::to_string(prefetch) + " io_threads " + std::to_string(threads);
            Loader loader(comm, src, opts(4, Remainder::mask, prefetch, threads));
            ASSERT_GT(loader.totals().steps, prefetch);  // same on every rank
            {
                std::vector<HostBatch> held;
                std::uint64_t got = 0;
                const auto out = h5t::catch_error<ConfigError>([&] {
                    auto range = loader.epoch(0);
                    for (;;) {
                        HostBatch b;
                        if (!range.next(b)) break;
                        ++got;
                        held.push_back(b);  // every rank keeps every batch alive
                    }
                });
                h5t::expect_same_error(out, "ConfigError", {"prefetch slots are held"});
                EXPECT_EQ(got, prefetch) << what;
                // The held batches are still intact.
                for (const auto& b : held) {
                    for (std::size_t s = 0; s < b.size(); ++s) {
                        const std::int64_t id = b.index()[s];
                        if (id < 0) continue;
                        const auto* img =
                            reinterpret_cast<const std::uint8_t*>(b.fields()[0].data) +
                            s * h5t::kPixels;
                        EXPECT_EQ(img[100], h5t::gen_pixel(static_cast<std::uint64_t>(id), 100))
                            << what;
                    }
                }
            }
            std::string error;
            const auto batches = drain(loader, 1, &error);
            EXPECT_EQ(error, "") << what;
            EXPECT_EQ(batches, loader.totals().steps) << what;
        }
    }
    src.close();
    comm.free();
}

// Asking for a second epoch while one is in flight, or for different epochs on different ranks,
// is the same ConfigError everywhere.
TEST(LoaderSafety, EpochMisuseIsAgreed) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    Loader loader(comm, src, opts(4, Remainder::pad, 2, 1));
    {
        auto range = loader.epoch(0);
        H5T_EXPECT_SAME_ERROR(ConfigError, loader.epoch(1), "in flight");
    }
    if (h5t::size() > 1) {
        const std::uint64_t e = h5t::rank() == 1 ? 5 : 4;
        H5T_EXPECT_SAME_ERROR(ConfigError, loader.epoch(e), "different epochs");
    }
    std::string error;
    EXPECT_EQ(drain(loader, 2, &error), loader.totals().steps);
    EXPECT_EQ(error, "");
    src.close();
    comm.free();
}
