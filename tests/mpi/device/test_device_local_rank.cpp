// Which GPU a rank stages to when the loader's communicator is not the node (issue 39, bug 1):
// 4 ranks on one host, 4 devices on the CUDA test double (MPISTAGE_FAKE_CUDA_DEVICES=4, set by
// tests/mpi/CMakeLists.txt), each loader given a communicator of its own rank alone (one rank
// per "node" group, as a data-parallel communicator beside tensor parallelism inside the node:
// its node rank is 0 everywhere). The expected device is each rank's local rank among the ranks
// of the host in MPI_COMM_WORLD, found here with MPI_Comm_split_type (independent of the
// launcher variables the library reads).
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "device_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/device.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;
using namespace device_test;

constexpr int kDevices = 4;
constexpr std::uint64_t kSamples = 64;

// This rank's local rank among the ranks of its host in MPI_COMM_WORLD.
int world_local_rank() {
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int r = 0;
    MPI_Comm_rank(node, &r);
    MPI_Comm_free(&node);
    return r;
}

// A communicator holding this rank alone (color = world rank): its node rank is 0.
MPI_Comm alone() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &c);
    return c;
}

LoaderOptions options(const std::string& device, void* stream) {
    LoaderOptions o;
    o.delivery.device = device;
    o.plan.batch_size = 4;
    o.plan.seed = 3;
    o.pipeline.prefetch = 2;
    o.pipeline.io_threads = 1;
    o.delivery.cuda_stream = stream;
    o.safety.timeout = std::chrono::seconds(60);  // a rank that fails alone ends the job, soon
    return o;
}

// Stages one epoch with `o` on a communicator of this rank alone; every batch is checked by a
// "kernel" on the consumer's stream, queued by this thread once `consumer_device` is current on
// it (after the loader chose its device; a stream call without a context would make one on
// device 0). Returns the loader's device; ADD_FAILUREs otherwise.
int stage_one_epoch(const LoaderOptions& o, cudaStream_t stream, int consumer_device) {
    MPI_Comm mine = alone();
    int device = -2;
    {
        Communicator comm(mine);
        comm.split_node();  // collective (over this rank alone): the node rank below
        EXPECT_EQ(comm.node_rank(), 0);
        GeneratedSource source(kSamples);
        std::atomic<int> mismatches{0};
        int before = -1, after = -1;
        EXPECT_EQ(cudaGetDevice(&before), cudaSuccess);
        Loader loader(comm, source, o);
        device = loader.stats().device.index;
        EXPECT_EQ(cudaGetDevice(&after), cudaSuccess);
        EXPECT_EQ(after, before) << "the loader changed the caller's current device";
        EXPECT_EQ(cudaSetDevice(consumer_device), cudaSuccess);
        std::uint64_t batches = 0;
        for (const HostBatch& b : loader.epoch(0)) {
            EXPECT_EQ(b.device(), device);
            launch_kernel(stream, b, std::chrono::microseconds(0), mismatches);
            ++batches;
        }
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_EQ(batches, kSamples / 4);
        EXPECT_EQ(mismatches.load(), 0) << "kernels saw bytes other than their batch's";
    }
    MPI_Comm_free(&mine);
    return device;
}

TEST(DeviceLocalRank, EachRankOfTheNodeStagesToItsOwnDevice) {
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    ASSERT_EQ(count, kDevices) << "MPISTAGE_FAKE_CUDA_DEVICES=4 is not set for this test";
    const int local = world_local_rank();
    for (const char* device : {"auto", "cuda"}) {
        // No current context on this thread: the loader must find the device from the local
        // rank alone. The consumer's stream is the legacy default stream (the loader's own
        // calls use its device's; the "kernels" run on the one of the device made current
        // after construction, the expected one: a wrong choice shows as wrong bytes).
        mpistage_fake_cuda_drain();
        mpistage_fake_cuda_reset_contexts();
        cudaStream_t stream = nullptr;
        EXPECT_EQ(stage_one_epoch(options(device, stream), stream, local % kDevices),
                  local % kDevices)
            << "device = " << device << ": rank " << local
            << " of the node did not stage to its own device";
        mpistage_fake_cuda_drain();
        EXPECT_EQ(mpistage_fake_cuda_context_mask(), 1u << (local % kDevices))
            << "contexts (bit mask) on devices other than this rank's";
    }
}

TEST(DeviceLocalRank, TheCallersCurrentDeviceWinsAndAnIndexWinsOverIt) {
    const int local = world_local_rank();
    const int chosen = (local + 1) % kDevices;  // not the local rank's device
    ASSERT_EQ(cudaSetDevice(chosen), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(stage_one_epoch(options("auto", stream), stream, chosen), chosen)
        << "auto did not take the caller's current device";
    EXPECT_EQ(stage_one_epoch(options("cuda", stream), stream, chosen), chosen)
        << "cuda did not take the caller's current device";
    // cuda:N wins over the current device; the consumer's stream is then one of device N.
    const int named = (local + 2) % kDevices;
    ASSERT_EQ(cudaSetDevice(named), cudaSuccess);
    cudaStream_t named_stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&named_stream, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(chosen), cudaSuccess);
    EXPECT_EQ(stage_one_epoch(options("cuda:" + std::to_string(named), named_stream), named_stream,
                              named),
              named)
        << "cuda:N must win over the current device";
    cudaStreamDestroy(named_stream);
    cudaStreamDestroy(stream);
}

TEST(DeviceLocalRank, WithoutALauncherVariableTheLoadersNodeRankIsUsed) {
    // The documented fallback: no launcher variable, so the node rank on the loader's own
    // communicator (MPI_COMM_WORLD here, one host: the world local rank again).
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID",
                             "SLURM_LOCALID", "LOCAL_RANK"}) {
        unsetenv(name);
    }
    EXPECT_EQ(launcher_local_rank(), -1);
    mpistage_fake_cuda_drain();
    mpistage_fake_cuda_reset_contexts();
    Communicator comm(MPI_COMM_WORLD);
    GeneratedSource source(kSamples);
    Loader loader(comm, source, options("cuda", nullptr));
    // The loader made the node split on its own communicator, for this fallback only (issue
    // 38); the same node rank as a split of the caller's communicator.
    EXPECT_FALSE(comm.has_node_split());
    EXPECT_TRUE(loader.comm().has_node_split());
    comm.split_node();
    if (loader.comm().has_node_split()) EXPECT_EQ(loader.comm().node_rank(), comm.node_rank());
    EXPECT_EQ(loader.stats().device.index, comm.node_rank() % kDevices);
    EXPECT_EQ(loader.stats().device.origin, DeviceOrigin::local_rank);
}

}  // namespace
