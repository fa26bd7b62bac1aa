// The device kind is agreed across ranks: rank 1 runs with a "driver older than the runtime"
// (the CUDA test double fails its initialisation), the others have devices. `auto` gives the
// CPU on every rank with one line for the job; `cuda` gives the same ConfigError on every rank.
#include <mpi.h>

#include <string>

#include "device_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;
using namespace device_test;

int count_lines(const std::string& text, const std::string& needle) {
    int n = 0;
    for (std::size_t at = text.find(needle); at != std::string::npos;
         at = text.find(needle, at + 1)) {
        ++n;
    }
    return n;
}

class DeviceAgreement : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        // Before the process's first device probe (mpistage probes once per process).
        mpistage_fake_cuda_fail_init(rank == 1 ? 1 : 0);
    }
};

TEST_F(DeviceAgreement, AutoStagesOnTheCpuEverywhereWithOneLine) {
    Communicator comm(MPI_COMM_WORLD);
    GeneratedSource source(64);
    LoaderOptions o;
    o.plan.batch_size = 4;
    o.delivery.device = "auto";
    ::testing::internal::CaptureStderr();
    std::string err;
    {
        Loader loader(comm, source, o);
        err = ::testing::internal::GetCapturedStderr();
        EXPECT_FALSE(loader.stats().device.cuda) << "rank " << comm.rank() << " is on CUDA";
        EXPECT_FALSE(loader.stats().pinned);
        std::uint64_t batches = 0;
        for (const HostBatch& b : loader.epoch(0)) {
            EXPECT_EQ(b.device(), -1);
            EXPECT_NE(b.fields()[0].data, nullptr);
            ++batches;
        }
        EXPECT_GT(batches, 0u);
    }
    const int lines = count_lines(err, "device auto: no usable CUDA device");
    const std::uint64_t total = comm.allreduce_sum(static_cast<std::uint64_t>(lines));
    EXPECT_EQ(total, 1u) << "the fallback line must be printed once for the job";
    if (comm.rank() == 0) {
        EXPECT_NE(err.find("insufficient"), std::string::npos) << err;
        EXPECT_NE(err.find("rank(s) 1"), std::string::npos) << err;
    }
}

TEST_F(DeviceAgreement, CudaAskedIsTheSameErrorOnEveryRank) {
    Communicator comm(MPI_COMM_WORLD);
    GeneratedSource source(64);
    LoaderOptions o;
    o.plan.batch_size = 4;
    o.delivery.device = "cuda";
    std::string message;
    try {
        Loader loader(comm, source, o);
    } catch (const ConfigError& e) {
        message = e.what();
    }
    ASSERT_FALSE(message.empty()) << "rank " << comm.rank() << " did not throw";
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
    const std::uint64_t h = fnv1a64(message);
    EXPECT_EQ(comm.allreduce_min(h), comm.allreduce_max(h)) << "messages differ: " << message;
}

}  // namespace
