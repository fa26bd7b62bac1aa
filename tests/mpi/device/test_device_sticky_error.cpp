// A sticky CUDA error on one rank (issue 39, acceptance 4): after it the runtime runs none of
// the copy stream's host functions, so the ring slots lent to copies never come back. The
// rank's wait for them checks the copy stream and ends within the timeout, and the failure is
// agreed: every rank throws the same CudaError, none hangs, the watchdog does not fire. With
// the unbounded wait (Ring::try_take / Prefetcher::take before this fix) the stopped rank
// waits forever and the other rank's watchdog ends the job instead.
#include <mpi.h>

#include <chrono>
#include <string>

#include "device_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;
using namespace device_test;

void run_case(std::size_t prefetch) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    Communicator comm(MPI_COMM_WORLD);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    GeneratedSource source(400);
    LoaderOptions o;
    o.delivery.device = "cuda";
    o.plan.batch_size = 5;
    o.plan.shuffle = Shuffle::local;
    // 1: the one slot is lent to the copy of the batch just taken, so the next step waits for
    // it (the wait that never ended); 3: a slot read ahead is free, and the next copy's
    // enqueue fails instead.
    o.pipeline.prefetch = prefetch;
    o.pipeline.io_threads = 1;
    o.delivery.cuda_stream = stream;
    o.safety.timeout = std::chrono::seconds(20);  // the watchdog, well above the 100 ms checks
    std::string error;
    const auto t0 = std::chrono::steady_clock::now();
    std::uint64_t steps = 0;
    {
        Loader loader(comm, source, o);
        ASSERT_TRUE(loader.stats().device.cuda);
        try {
            for (const HostBatch& b : loader.epoch(0)) {
                (void)b;
                // Rank 0's "kernel" hits an illegal address after its third batch.
                if (++steps == 3 && comm.rank() == 0) {
                    mpistage_fake_cuda_set_sticky_error(cudaErrorIllegalAddress);
                }
            }
        } catch (const CudaError& e) {
            error = e.what();
        }
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(error.find("cudaErrorIllegalAddress"), std::string::npos)
        << "rank " << comm.rank() << " got '" << error << "'";
    std::uint64_t mine = fnv1a64(error);
    std::uint64_t lo = 0, hi = 0;
    MPI_Allreduce(&mine, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo, hi) << "ranks ended with different errors; this one: " << error;
    EXPECT_LT(took, 20.0) << "ended by the watchdog's timeout, not by the agreed error";
    mpistage_fake_cuda_set_sticky_error(0);
}

TEST(DeviceStickyError, OneRanksStickyErrorIsTheSameCudaErrorOnEveryRank) {
    ASSERT_EQ(mpistage_fake_cuda_active(), 1);
    run_case(1);
    run_case(3);
}

}  // namespace
