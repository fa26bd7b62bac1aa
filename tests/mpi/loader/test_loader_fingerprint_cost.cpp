// The cost of the dataset fingerprint (issue "The last silent edges": the default `sampled`
// level hashed something for every row of the shard at construction, 120 s at 10^12 rows
// without a line). Over a virtual source whose rows are computed from their id (no storage),
// the rows the default level reads and sizes are bounded by a constant independent of N: the
// same count at N = 10^6 and at N = 10^12, and a Loader over 10^12 rows constructs. The
// levels that stay O(N/W) (`full`, and `sampled_v4` of older states) sweep in slices under
// the watchdog: a sweep longer than the timeout on one rank does not expire it on the others.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "loader/fingerprint.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;

/// N rows of one fixed field of 8 bytes, row `id` holding mix64(id) (little-endian): nothing
/// stored, so N may be 10^12. Counts the rows read and the sizes looked up; reads of ids
/// below `slow_below` first sleep `delay` per `read` call.
class VirtualSource final : public Source {
public:
    explicit VirtualSource(std::uint64_t num_samples) : num_samples_(num_samples) {
        fields_.push_back(FieldInfo{"x", DType::uint8, {8}, 8, false});
    }
    const std::vector<FieldInfo>& fields() const override { return fields_; }
    std::uint64_t num_samples() const override { return num_samples_; }
    std::uint64_t records_in_cut(int rank, int w) const override {
        return fixed_records_in_cut(num_samples_, 8, rank, w);
    }
    std::string fingerprint() const override { return "virtual:" + std::to_string(num_samples_); }
    std::uint64_t sample_bytes(std::uint64_t id) const override {
        (void)id;
        sizes_.fetch_add(1, std::memory_order_relaxed);
        return 8;
    }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        if (count > 0 && ids[0] < slow_below_) std::this_thread::sleep_for(delay_);
        for (std::size_t k = 0; k < count; ++k) {
            const std::uint64_t v = mix64(ids[k]);
            std::byte* out = sink.fixed(0, k);
            for (int b = 0; b < 8; ++b) out[b] = static_cast<std::byte>(v >> (8 * b));
        }
        rows_.fetch_add(count, std::memory_order_relaxed);
    }

    void slow_down(std::uint64_t below, std::chrono::milliseconds delay) {
        slow_below_ = below;
        delay_ = delay;
    }
    /// Collective: rows read and sizes looked up on every rank since the last call, summed.
    std::pair<std::uint64_t, std::uint64_t> take_counts(const Communicator& comm) {
        const auto sums =
            comm.allreduce_sum(std::vector<std::uint64_t>{rows_.exchange(0), sizes_.exchange(0)});
        return {sums[0], sums[1]};
    }

private:
    std::uint64_t num_samples_;
    std::vector<FieldInfo> fields_;
    std::uint64_t slow_below_ = 0;
    std::chrono::milliseconds delay_{0};
    mutable std::atomic<std::uint64_t> rows_{0};
    mutable std::atomic<std::uint64_t> sizes_{0};
};

constexpr std::uint64_t kMillion = 1000000;
constexpr std::uint64_t kTrillion = 1000000000000;
/// The most rows the default fingerprint may touch, whatever N is.
constexpr std::uint64_t kBound = detail::kFingerprintStrata + 2;

// The default level reads and sizes exactly its positions (at most 1026, divided among the
// ranks): the same count at 10^6 and 10^12 rows. (The fingerprint before this change looked
// up the size of every row: 10^6 here, and hours at 10^12.)
TEST(FingerprintCost, SampledTouchesABoundedNumberOfRows) {
    Communicator comm(MPI_COMM_WORLD);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> counts;
    for (const std::uint64_t n : {kMillion, kTrillion}) {
        VirtualSource src(n);
        const std::string fp =
            detail::dataset_fingerprint(comm, src, n, 0, FingerprintLevel::sampled);
        const auto [rows, sizes] = src.take_counts(comm);  // the same on every rank
        const std::uint64_t positions = detail::fingerprint_positions(n).size();
        EXPECT_EQ(fp.size(), 16u);
        EXPECT_LE(positions, kBound);
        // Agreed counts: the same outcome on every rank before the next collective.
        ASSERT_EQ(rows, positions) << "N = " << n;
        ASSERT_EQ(sizes, positions) << "N = " << n;
        counts.emplace_back(rows, sizes);
    }
    EXPECT_EQ(counts[0], counts[1]) << "the rows touched depend on N";
    comm.free();
}

// Acceptance 4: a Loader over 10^12 virtual rows with the default options (fingerprint
// `sampled`) constructs, and touches no more rows at 10^12 than at 10^6: the fingerprint's
// positions plus the first and last row of each rank's shard and of its neighbour's (the
// contents check). The wall time is shown by hand (docs/resume.md, "Fingerprint levels").
TEST(FingerprintCost, LoaderOverATrillionRowsConstructsWithABoundedRead) {
    Communicator comm(MPI_COMM_WORLD);
    const std::uint64_t contents_check = 4 * static_cast<std::uint64_t>(comm.size());
    std::vector<std::uint64_t> touched;
    for (const std::uint64_t n : {kMillion, kTrillion}) {
        VirtualSource src(n);
        LoaderOptions o;
        o.delivery.pin_memory = false;
        o.delivery.log_device_fallback = false;
        std::uint64_t rows = 0;
        std::uint64_t sizes = 0;
        {
            Loader loader(comm, src, o);
            const LoaderState s = loader.state();
            EXPECT_EQ(s.num_samples, n);
            EXPECT_EQ(s.fingerprint_level, FingerprintLevel::sampled);
            std::tie(rows, sizes) = src.take_counts(comm);
            loader.close();
        }
        ASSERT_LE(rows, kBound + contents_check) << "N = " << n;
        ASSERT_LE(sizes, kBound) << "N = " << n;
        touched.push_back(rows + sizes);
    }
    EXPECT_EQ(touched[0], touched[1]) << "the rows touched at construction depend on N";
    comm.free();
}

// `full` sweeps every row of its shard in slices, each closed by an agreement: with a 1 s
// timeout, a sweep of about 2 s on rank 0 (the others have nothing slow to read) never leaves
// another rank waiting 1 s in one collective (the fingerprint of one long local phase did:
// the watchdog expired on every other rank). The value is the same as without the delay.
TEST(FingerprintCost, FullSweepOfOneSlowRankStaysUnderTheWatchdog) {
    Communicator comm(MPI_COMM_WORLD);
    constexpr std::uint64_t kCalls = 400;  // read calls of 64 rows in the slow half, 5 ms each
    const std::uint64_t n = 2 * kCalls * 64;
    VirtualSource src(n);
    const std::string quick = detail::dataset_fingerprint(comm, src, n, 0, FingerprintLevel::full);
    src.slow_down(n / 2, std::chrono::milliseconds(5));  // rank 0's shard at 2 ranks
    int expiries = 0;
    comm.set_timeout(std::chrono::seconds(1));
    comm.set_expiry_handler([&](const std::string&) { ++expiries; });
    const std::string slow = detail::dataset_fingerprint(comm, src, n, 0, FingerprintLevel::full);
    comm.set_expiry_handler({});
    comm.set_timeout(std::chrono::seconds(300));
    EXPECT_EQ(comm.allreduce_sum(static_cast<std::uint64_t>(expiries)), 0u);
    EXPECT_EQ(slow, quick);
    // `full` looked up every size and read every row once (plus its positions).
    const auto [rows, sizes] = src.take_counts(comm);
    const std::uint64_t positions = detail::fingerprint_positions(n).size();
    EXPECT_EQ(rows, 2 * (n + positions));
    EXPECT_EQ(sizes, 2 * (n + positions));
    comm.free();
}

// The level of `sampled` states of format versions 3 and 4 is still computed (to resume
// them): every row's size, no row read beyond the positions; a value of its own.
TEST(FingerprintCost, SampledV4SizesEveryRowAndDiffersFromSampled) {
    Communicator comm(MPI_COMM_WORLD);
    const std::uint64_t n = 100000;
    VirtualSource src(n);
    const std::string v4 =
        detail::dataset_fingerprint(comm, src, n, 0, FingerprintLevel::sampled_v4);
    const auto [rows, sizes] = src.take_counts(comm);
    const std::uint64_t positions = detail::fingerprint_positions(n).size();
    EXPECT_EQ(rows, positions);
    EXPECT_EQ(sizes, n + positions);
    EXPECT_NE(v4, detail::dataset_fingerprint(comm, src, n, 0, FingerprintLevel::sampled));
    EXPECT_NE(v4, detail::dataset_fingerprint(comm, src, n, 0, FingerprintLevel::full));
    comm.free();
}

}  // namespace
