// The note for ranks of one node that stage to one GPU nobody asked for (issue 39, bug 1): at 3
// ranks on one host with the double's 2 devices, the node-local ranks 0 and 2 both resolve to
// cuda:0. Rank 0 prints one line naming them; nothing is printed when the ranks chose their
// device (current device or cuda:N), even where two of them share it.
#include <mpi.h>

#include <string>

#include "device_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;
using namespace device_test;

// Builds a loader with `device` on MPI_COMM_WORLD (stderr captured on rank 0) and returns what
// rank 0 printed (empty elsewhere).
std::string construct_and_capture(const std::string& device, int* chosen) {
    Communicator comm(MPI_COMM_WORLD);
    GeneratedSource source(30);
    LoaderOptions o;
    o.delivery.device = device;
    o.plan.batch_size = 3;
    if (comm.rank() == 0) testing::internal::CaptureStderr();
    {
        Loader loader(comm, source, o);
        *chosen = loader.stats().device.index;
    }
    return comm.rank() == 0 ? testing::internal::GetCapturedStderr() : std::string();
}

TEST(DeviceSharedNote, NothingWhenTheRanksChoseTheirDevice) {
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    mpistage_fake_cuda_reset_contexts();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // every rank makes cuda:0 current
    int chosen = -1;
    EXPECT_EQ(construct_and_capture("auto", &chosen), "");
    EXPECT_EQ(chosen, 0);
    mpistage_fake_cuda_reset_contexts();
    EXPECT_EQ(construct_and_capture("cuda:1", &chosen), "");
    EXPECT_EQ(chosen, 1);
}

TEST(DeviceSharedNote, RanksOfOneNodeOnOneUnaskedDeviceGetOneLine) {
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    ASSERT_EQ(world_size, 3) << "registered at 3 ranks (tests/mpi/CMakeLists.txt)";
    mpistage_fake_cuda_reset_contexts();  // no current device: the local rank decides
    int chosen = -1;
    const std::string printed = construct_and_capture("auto", &chosen);
    EXPECT_EQ(chosen, world_rank % 2);
    if (world_rank == 0) {
        EXPECT_NE(printed.find("ranks 0,2 of one node all stage to cuda:0"), std::string::npos)
            << printed;
        EXPECT_NE(printed.find("cudaSetDevice"), std::string::npos) << printed;
        EXPECT_EQ(printed.find('\n'), printed.size() - 1) << "one line: " << printed;
    }
    // Once per process: a second loader says nothing more.
    mpistage_fake_cuda_reset_contexts();
    EXPECT_EQ(construct_and_capture("cuda", &chosen), "");
}

}  // namespace
