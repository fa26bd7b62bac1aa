// CUDA graph capture on the trainer's stream (issue 39, bug 8), on the CUDA test double, which
// models capture as the runtime documents it: work queued on a capturing stream is captured,
// an unsafe call (cudaMalloc, queries, synchronisations) during a global-mode capture fails
// and invalidates it, and a captured event waited on from outside is an isolation error.
//  - next() while the consumer's stream captures: the loader would allocate, query and wait
//    inside the user's graph. It is refused before any CUDA call, with the same ConfigError on
//    every rank (the capturing rank's failure agreed at its step), and the graph stays valid.
//    With the refusal removed (epoch_range.cpp, `refuse_capture`) rank 0's capture is
//    invalidated and the error is a CudaError.
//  - dropping a batch during a capture (Python's collector may do it anywhere): the release
//    point is not recorded into the graph but at the block's next lend. With the old release
//    (an event recorded on the capturing stream), the next copy into that block waits on a
//    captured event: cudaErrorStreamCaptureIsolation.
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

LoaderOptions options_on(cudaStream_t stream) {
    LoaderOptions o;
    o.delivery.device = "cuda";
    o.delivery.cuda_stream = stream;
    o.plan.batch_size = 5;
    o.plan.shuffle = Shuffle::local;
    o.pipeline.prefetch = 2;
    o.pipeline.io_threads = 1;
    o.safety.timeout = std::chrono::seconds(20);
    return o;
}

TEST(DeviceCapture, NextDuringACaptureIsRefusedOnEveryRankAndTheGraphStaysValid) {
    ASSERT_EQ(mpistage_fake_cuda_active(), 1);
    Communicator comm(MPI_COMM_WORLD);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    GeneratedSource source(200);
    const unsigned long long invalidated_before = mpistage_fake_cuda_invalidated_captures();
    std::atomic<int> mismatches{0};
    std::string error;
    bool config_error = false;
    cudaError_t end_capture = cudaSuccess;
    const auto t0 = std::chrono::steady_clock::now();
    {
        Loader loader(comm, source, options_on(stream));
        ASSERT_TRUE(loader.stats().device.cuda);
        EpochRange range = loader.epoch(0);
        HostBatch b;
        for (int i = 0; i < 3; ++i) {
            ASSERT_TRUE(range.next(b));
            launch_kernel(stream, b, std::chrono::microseconds(200), mismatches);
        }
        // Rank 0 captures a graph on its consumer stream (torch.cuda.graph's default mode).
        if (comm.rank() == 0) {
            ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
        }
        try {
            (void)range.next(b);  // also drops the batch held in `b`, during the capture
        } catch (const ConfigError& e) {
            config_error = true;
            error = e.what();
        } catch (const Error& e) {
            error = e.what();
        }
        if (comm.rank() == 0) {
            cudaGraph_t graph = nullptr;
            end_capture = cudaStreamEndCapture(stream, &graph);
            if (graph) (void)cudaGraphDestroy(graph);
        }
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(config_error) << "rank " << comm.rank() << " got '" << error << "'";
    EXPECT_NE(error.find("is capturing a CUDA graph"), std::string::npos) << error;
    EXPECT_NE(error.find("rank 0"), std::string::npos) << "the error names the rank: " << error;
    EXPECT_TRUE(same_on_every_rank(error)) << "ranks ended with different errors: " << error;
    EXPECT_EQ(end_capture, cudaSuccess) << "the trainer's graph was invalidated";
    EXPECT_EQ(mpistage_fake_cuda_invalidated_captures(), invalidated_before);
    EXPECT_EQ(mismatches.load(), 0);
    EXPECT_LT(took, 20.0) << "ended by the watchdog's timeout, not by the agreed error";
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(DeviceCapture, ADropDuringACaptureRecordsNothingIntoTheGraph) {
    ASSERT_EQ(mpistage_fake_cuda_active(), 1);
    Communicator comm(MPI_COMM_WORLD);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    GeneratedSource source(300);
    const unsigned long long invalidated_before = mpistage_fake_cuda_invalidated_captures();
    std::atomic<int> mismatches{0};
    std::uint64_t batches = 0;
    {
        Loader loader(comm, source, options_on(stream));
        EpochRange range = loader.epoch(0);
        HostBatch held;
        ASSERT_TRUE(range.next(held));
        launch_kernel(stream, held, std::chrono::microseconds(200), mismatches);
        ++batches;
        ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
        held = HostBatch();  // the last holder goes while the stream captures
        cudaGraph_t graph = nullptr;
        EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
        if (graph) (void)cudaGraphDestroy(graph);
        // Every block is reused several times over the epoch: the dropped one included.
        HostBatch b;
        while (range.next(b)) {
            launch_kernel(stream, b, std::chrono::microseconds(200), mismatches);
            ++batches;
        }
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
    EXPECT_EQ(batches, 300u / 5 / static_cast<std::uint64_t>(comm.size()));
    EXPECT_EQ(mismatches.load(), 0);
    EXPECT_EQ(mpistage_fake_cuda_invalidated_captures(), invalidated_before);
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
