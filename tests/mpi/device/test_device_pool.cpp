// The loader's device pool (issue 39, bug 7) and failed CUDA calls, on the CUDA test double:
//  - a full device: a rank whose pool cannot grow (the trainer keeps every batch; the double's
//    device memory limit) ends the job with the same CudaError on every rank, naming the pool's
//    blocks and what to do, within the timeout;
//  - blocks the trainer held beyond the window are freed at the epoch's end (without `trim` the
//    pool keeps its largest size for the rest of the job), and only after the kernels that read
//    them ran (a cudaFree that does not synchronise: the double's poison);
//  - injected failures of cudaMalloc, cudaMemcpyAsync and cudaLaunchHostFunc on one rank are
//    the same CudaError on every rank, never a hang.
#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

#include "device_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;
using namespace device_test;

constexpr unsigned long long kBlock = 2ull << 20;  // the pool's granule: one batch here

LoaderOptions cuda_options(cudaStream_t stream) {
    LoaderOptions o;
    o.delivery.device = "cuda";
    o.delivery.cuda_stream = stream;
    o.plan.batch_size = 5;
    o.plan.shuffle = Shuffle::local;
    o.pipeline.prefetch = 2;  // the pool's base: prefetch + 2 blocks
    o.pipeline.io_threads = 1;
    o.safety.timeout = std::chrono::seconds(20);
    return o;
}

struct Outcome {
    std::string error;
    std::uint64_t batches = 0;
    double seconds = 0;
};

// One epoch; `hold` keeps every batch alive until the end (a trainer accumulating them);
// `kernels` reads each batch on the consumer's stream (a host function of the double).
Outcome run_epoch(const Communicator& comm, bool hold, bool kernels = true) {
    cudaStream_t stream = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    GeneratedSource source(200);
    Outcome out;
    std::atomic<int> mismatches{0};
    const auto t0 = std::chrono::steady_clock::now();
    try {
        Loader loader(comm, source, cuda_options(stream));
        std::vector<HostBatch> kept;
        for (const HostBatch& b : loader.epoch(0)) {
            if (kernels) launch_kernel(stream, b, std::chrono::microseconds(100), mismatches);
            ++out.batches;
            if (hold) kept.push_back(b);
        }
    } catch (const Error& e) {
        out.error = e.what();
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    EXPECT_EQ(mismatches.load(), 0);
    return out;
}

class DevicePoolTest : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_EQ(mpistage_fake_cuda_active(), 1);
        ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    }
    void TearDown() override {
        mpistage_fake_cuda_set_device_memory_limit(0);
        mpistage_fake_cuda_set_free_syncs(1);
        for (const char* call : {"cudaMalloc", "cudaMemcpyAsync", "cudaLaunchHostFunc"}) {
            mpistage_fake_cuda_fail_next(call, 0, 0);
        }
    }
    Communicator comm{MPI_COMM_WORLD};
};

TEST_F(DevicePoolTest, AFullDeviceIsTheSameCudaErrorOnEveryRank) {
    // Rank 0's device holds 7 batches: the pool's 4, then 3 more kept by the trainer.
    if (comm.rank() == 0) mpistage_fake_cuda_set_device_memory_limit(7 * kBlock);
    const Outcome o = run_epoch(comm, true);
    EXPECT_NE(o.error.find("cudaErrorMemoryAllocation"), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("the device is full"), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("7 blocks"), std::string::npos) << o.error;
    EXPECT_TRUE(same_on_every_rank(o.error)) << "ranks ended with different errors: " << o.error;
    EXPECT_LT(o.seconds, 20.0) << "ended by the watchdog's timeout, not by the agreed error";
}

TEST_F(DevicePoolTest, BlocksHeldBeyondTheWindowAreFreedAtTheEpochsEnd) {
    const unsigned long long before = mpistage_fake_cuda_device_bytes(0);
    const Outcome o = run_epoch(comm, true);
    ASSERT_EQ(o.error, "");
    // 200 samples, batches of 5: every batch was kept, so the pool grew to one block each.
    EXPECT_GE(o.batches, 200u / 5 / static_cast<std::uint64_t>(comm.size()));
    EXPECT_EQ(mpistage_fake_cuda_device_bytes(0), before) << "blocks outlived the loader";
    // Within one loader: held blocks are freed at the end of the epoch that grew the pool.
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    GeneratedSource source(200);
    {
        Loader loader(comm, source, cuda_options(stream));
        {
            std::vector<HostBatch> kept;
            for (const HostBatch& b : loader.epoch(0)) kept.push_back(b);
            EXPECT_GE(mpistage_fake_cuda_device_bytes(0) - before, kept.size() * kBlock);
        }
        for (const HostBatch& b : loader.epoch(1)) (void)b;  // ends with trim()
        EXPECT_LE(mpistage_fake_cuda_device_bytes(0) - before, 4 * kBlock)
            << "the pool kept the blocks of the batches held in epoch 0";
    }
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(DevicePoolTest, ABlockIsFreedOnlyAfterTheKernelsThatReadItRan) {
    // cudaFree that does not synchronise (the double poisons the block at once): the pool's
    // trim at the epoch's end must wait for its own release fences. Every batch is kept and
    // read by a slow kernel on the consumer's stream (2 ms each, queued far behind the loop),
    // then dropped just before the epoch's last next(), which frees the blocks beyond the base.
    // Without the fence waits in DevicePool::trim: kernels read poison (mismatches).
    mpistage_fake_cuda_set_free_syncs(0);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    GeneratedSource source(200);
    std::atomic<int> mismatches{0};
    {
        Loader loader(comm, source, cuda_options(stream));
        EpochRange range = loader.epoch(0);
        std::vector<HostBatch> kept;
        HostBatch b;
        while (kept.size() < range.steps() && range.next(b)) {
            launch_kernel(stream, b, std::chrono::milliseconds(2), mismatches);
            kept.push_back(b);
        }
        ASSERT_GT(kept.size(), 4u) << "the pool never grew beyond its base";
        kept.clear();
        b = HostBatch();
        EXPECT_FALSE(range.next(b));  // the end: trim() frees the blocks beyond the base
    }
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    mpistage_fake_cuda_set_free_syncs(1);
    EXPECT_EQ(mismatches.load(), 0) << "a kernel read a block the pool had already freed";
}

TEST_F(DevicePoolTest, InjectedFailuresOnOneRankAreTheSameCudaErrorOnEveryRank) {
    const int last = comm.size() - 1;
    for (const char* call : {"cudaMalloc", "cudaMemcpyAsync", "cudaLaunchHostFunc"}) {
        SCOPED_TRACE(call);
        // The last rank's call fails at its 6th batch.
        if (comm.rank() == last) mpistage_fake_cuda_fail_next(call, 5, cudaErrorLaunchFailure);
        const bool malloc_call = std::string(call) == "cudaMalloc";
        // cudaMalloc is called once per new block: fail the first one instead.
        if (malloc_call && comm.rank() == last) {
            mpistage_fake_cuda_fail_next(call, 0, cudaErrorMemoryAllocation);
        }
        // The test's own "kernels" are host functions too: none while one is to fail.
        const Outcome o = run_epoch(comm, false, std::string(call) != "cudaLaunchHostFunc");
        EXPECT_NE(o.error.find(call), std::string::npos) << o.error;
        if (comm.size() > 1) {  // one rank: no rank prefix
            EXPECT_NE(o.error.find("rank " + std::to_string(last)), std::string::npos) << o.error;
        }
        EXPECT_TRUE(same_on_every_rank(o.error)) << "different errors: " << o.error;
        EXPECT_LT(o.seconds, 20.0) << "ended by the watchdog's timeout";
        mpistage_fake_cuda_fail_next(call, 0, 0);
    }
}

}  // namespace
