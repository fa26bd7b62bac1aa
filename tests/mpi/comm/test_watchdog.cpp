// The collective watchdog (issue "Collective safety"): a collective that does not complete
// within the communicator's deadline names the ranks that did not arrive and what every rank
// was doing; waiting ranks sleep instead of spinning; the loader splits its waiting time into
// waiting for its own reads and waiting for the other ranks.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "../hdf5_test_util.hpp"
#include "comm/pending.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

using namespace mpistage;
using std::chrono::duration;

namespace {

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/// Forwards to an inner source; `read` first sleeps `delay` on this rank.
class SlowSource final : public Source {
public:
    SlowSource(const Source& inner, std::chrono::milliseconds delay)
        : inner_(inner), delay_(delay) {}
    const std::vector<FieldInfo>& fields() const override { return inner_.fields(); }
    std::uint64_t num_samples() const override { return inner_.num_samples(); }
    std::uint64_t records_in_cut(int r, int w) const override {
        return inner_.records_in_cut(r, w);
    }
    std::string fingerprint() const override { return inner_.fingerprint(); }
    bool reads_use_mpi() const override { return inner_.reads_use_mpi(); }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        std::this_thread::sleep_for(delay_);
        inner_.read(ids, count, sink);
    }

private:
    const Source& inner_;
    std::chrono::milliseconds delay_;
};

}  // namespace

// The last rank arrives 4.5 s late at an allreduce with a 1 s deadline. Every other rank's
// report names it as the one that did not arrive and says what each waiting rank was doing
// (phase, epoch, step); the collective still completes with the right value once it arrives
// (the expiry handler replaces the abort); waiting ranks slept rather than spun.
TEST(Watchdog, ReportNamesTheLateRankAndWhatEachRankWasDoing) {
    const int w = h5t::size();
    const int r = h5t::rank();
    Communicator comm(MPI_COMM_WORLD);
    comm.set_timeout(std::chrono::seconds(1));
    std::vector<std::string> reports;
    comm.set_expiry_handler([&](const std::string& report) { reports.push_back(report); });
    comm.set_context({"test: agree on batch", 3, 7 + r, "", -1});
    const bool late = w > 1 && r == w - 1;
    if (late) std::this_thread::sleep_for(std::chrono::milliseconds(4500));
    const double cpu0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t sum = comm.allreduce_sum(static_cast<std::uint64_t>(r + 1));
    const double wall = duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpu_seconds() - cpu0;
    EXPECT_EQ(sum, static_cast<std::uint64_t>(w) * static_cast<std::uint64_t>(w + 1) / 2);
    if (w > 1 && !late) {
        ASSERT_EQ(reports.size(), 1u) << "rank " << r;
        const std::string& rep = reports[0];
        EXPECT_NE(rep.find("Rank(s) that did not arrive: " + std::to_string(w - 1) + " "),
                  std::string::npos)
            << rep;
        EXPECT_NE(rep.find("rank " + std::to_string(w - 1) + ": no answer"), std::string::npos)
            << rep;
        for (int q = 0; q < w - 1; ++q) {
            EXPECT_NE(rep.find("rank " + std::to_string(q) + ": waiting at collective #"),
                      std::string::npos)
                << rep;
            EXPECT_NE(rep.find("test: agree on batch, epoch 3, step " + std::to_string(7 + q)),
                      std::string::npos)
                << rep;
        }
        EXPECT_NE(rep.find("MPI_Iallreduce(sum)"), std::string::npos) << rep;
        EXPECT_NE(rep.find("within 1 s"), std::string::npos) << rep;
        EXPECT_GT(wall, 3.0);
        EXPECT_GT(comm.collective_wait().count(), 3.0);
        // Polling sleeps: far less CPU than wall time while waiting for the late rank.
        EXPECT_LT(cpu, 0.5 * wall) << "cpu " << cpu << " s of " << wall << " s waiting";
    } else {
        EXPECT_TRUE(reports.empty()) << "rank " << r << ": " << (reports.empty() ? "" : reports[0]);
        EXPECT_LT(comm.collective_wait().count(), 1.0);
    }
    comm.free();
}

// Collectives that complete in time never call the handler; timeout 0 turns the watchdog off.
TEST(Watchdog, NoReportWhenEveryRankArrives) {
    Communicator comm(MPI_COMM_WORLD);
    EXPECT_EQ(comm.timeout(), kDefaultCollectiveTimeout);
    int calls = 0;
    comm.set_expiry_handler([&](const std::string&) { ++calls; });
    for (const int t : {1, 0}) {
        comm.set_timeout(std::chrono::seconds(t));
        for (int i = 0; i < 50; ++i) {
            EXPECT_EQ(comm.allreduce_max(static_cast<std::uint64_t>(h5t::rank() + i)),
                      static_cast<std::uint64_t>(h5t::size() - 1 + i));
        }
        const auto all =
            comm.allgather(std::vector<std::uint64_t>{1, static_cast<std::uint64_t>(h5t::rank())});
        ASSERT_EQ(all.size(), 2u * static_cast<std::size_t>(h5t::size()));
        for (int q = 0; q < h5t::size(); ++q)
            EXPECT_EQ(all[2 * static_cast<std::size_t>(q) + 1], static_cast<std::uint64_t>(q));
        EXPECT_EQ(comm.broadcast(h5t::rank() == 0 ? "from zero" : "", 0), "from zero");
        comm.barrier();
    }
    EXPECT_EQ(calls, 0);
    comm.free();
}

// The loader's own communicator gets LoaderOptions::timeout, and a negative one is refused.
TEST(Watchdog, LoaderTimeoutReachesItsCommunicator) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    LoaderOptions o;
    o.plan.batch_size = 8;
    o.delivery.pin_memory = false;
    o.safety.timeout = std::chrono::seconds(17);
    {
        Loader loader(comm, src, o);
        EXPECT_EQ(loader.comm().timeout(), std::chrono::seconds(17));
    }
    o.safety.timeout = std::chrono::seconds(-1);
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, o), "timeout", "negative");
    if (h5t::size() > 1) {
        o.safety.timeout = std::chrono::seconds(h5t::rank() == 1 ? 5 : 6);
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, o), "timeout", "5 s", "6 s");
    }
    src.close();
    comm.free();
}

// A rank whose reads are slow: its waiting is I/O (ring empty), the others' is peers
// (blocked in the per-step agreement).
TEST(Watchdog, WaitForPeersIsSeparateFromWaitForIo) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    const int w = h5t::size();
    const bool slow = h5t::rank() == w - 1;
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source inner(comm, files.generated_contiguous);
    SlowSource src(inner, std::chrono::milliseconds(slow ? 40 : 0));
    LoaderOptions o;
    o.plan.batch_size = 16;
    o.delivery.pin_memory = false;
    o.pipeline.io_threads = 0;  // reads on the consumer thread: their time is I/O wait
    Loader loader(comm, src, o);
    std::uint64_t batches = 0;
    {
        auto range = loader.epoch(0);
        HostBatch b;
        while (range.next(b)) ++batches;
    }
    const LoaderStats& s = loader.stats();
    const double io = s.wait_io_time.count();
    const double peers = s.wait_peers_time.count();
    const double floor = 0.03 * static_cast<double>(batches);  // 40 ms a read, some slack
    if (slow) {
        EXPECT_GT(io, floor) << "io " << io << " peers " << peers;
        EXPECT_LT(peers, io / 2) << "io " << io << " peers " << peers;
    } else {
        EXPECT_GT(peers, floor) << "io " << io << " peers " << peers;
        EXPECT_LT(io, peers / 2) << "io " << io << " peers " << peers;
    }
    EXPECT_GE(s.wait_time.count() + 1e-9, io + peers);
    inner.close();
    comm.free();
}

// A window request of the loader (detail::PendingAllreduce: started now, completed later) is
// watched like every other collective: the last rank starts it 2.5 s late with a 1 s deadline,
// so the others' wait expires with a report naming the request's call and number (the late
// rank answers within the 2 s grace, so it is not listed as absent); the result
// is still the element-wise minimum, and later collectives keep their sequence.
TEST(Watchdog, PendingAllreduceIsWatchedUnderItsStartNumber) {
    const int w = h5t::size();
    const int r = h5t::rank();
    Communicator comm(MPI_COMM_WORLD);
    comm.set_timeout(std::chrono::seconds(1));
    std::vector<std::string> reports;
    comm.set_expiry_handler([&](const std::string& report) { reports.push_back(report); });
    comm.set_context({"test: window agreement", 0, 5, "", -1});
    const bool late = w > 1 && r == w - 1;
    if (late) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    detail::PendingAllreduce p(
        comm, {static_cast<std::uint64_t>(10 + r), static_cast<std::uint64_t>(100 - r)},
        "MPI_Iallreduce(window agreement)");
    (void)p.test();  // never blocks
    const std::vector<std::uint64_t> got = p.wait();
    EXPECT_EQ(got, (std::vector<std::uint64_t>{10, static_cast<std::uint64_t>(101 - w)}));
    EXPECT_TRUE(p.done());
    if (w > 1 && !late) {
        ASSERT_EQ(reports.size(), 1u) << "rank " << r;
        EXPECT_NE(reports[0].find("(MPI_Iallreduce(window agreement))"), std::string::npos)
            << reports[0];
        EXPECT_NE(reports[0].find("rank 0: waiting at collective #0 "), std::string::npos)
            << reports[0];
        EXPECT_NE(reports[0].find("test: window agreement"), std::string::npos) << reports[0];
    } else {
        EXPECT_TRUE(reports.empty()) << "rank " << r;
    }
    comm.set_expiry_handler({});
    EXPECT_EQ(comm.allreduce_sum(1), static_cast<std::uint64_t>(w));
    comm.free();
}
