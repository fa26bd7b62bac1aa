// Device selection without a GPU: parsing, auto → CPU with one log line, explicit cuda errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "device/device_choice.hpp"
#include "mpistage/device.hpp"
#include "mpistage/error.hpp"

using namespace mpistage;

TEST(StageDevice, ParsesEveryForm) {
    EXPECT_EQ(parse_device("auto").mode, DeviceMode::automatic);
    EXPECT_EQ(parse_device("cpu").mode, DeviceMode::cpu);
    const DeviceSpec any = parse_device("cuda");
    EXPECT_EQ(any.mode, DeviceMode::cuda);
    EXPECT_EQ(any.index, -1);
    const DeviceSpec three = parse_device("cuda:3");
    EXPECT_EQ(three.mode, DeviceMode::cuda);
    EXPECT_EQ(three.index, 3);
    for (const char* text : {"auto", "cpu", "cuda", "cuda:0", "cuda:17"}) {
        EXPECT_EQ(parse_device(text).text(), text);
    }
}

TEST(StageDevice, RejectsMalformedOptions) {
    for (const char* text : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1024",
                             "cuda:99999", "cpu:0", " cuda", "cuda:1 "}) {
        try {
            parse_device(text);
            ADD_FAILURE() << "'" << text << "' was accepted";
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("'") + text + "'"), std::string::npos)
                << e.what();
        }
    }
}

TEST(StageDevice, CpuIsAlwaysTheCpu) {
    const DeviceChoice c = choose_device(parse_device("cpu"), 5);
    EXPECT_FALSE(c.cuda);
    EXPECT_FALSE(c.fell_back);
    EXPECT_EQ(c.name(), "cpu");
}

TEST(StageDevice, AutoPicksNodeRankModVisibleDevicesOrFallsBack) {
    const CudaDeviceInfo info = probe_cuda_device(0);
    for (int node_rank : {0, 1, 2, 7}) {
        const DeviceChoice c = choose_device(parse_device("auto"), node_rank);
        if (info.usable) {
            EXPECT_TRUE(c.cuda);
            EXPECT_EQ(c.index, node_rank % info.device_count);
            EXPECT_EQ(c.name(), "cuda:" + std::to_string(node_rank % info.device_count));
        } else {
            EXPECT_FALSE(c.cuda);
            EXPECT_TRUE(c.fell_back);
            EXPECT_EQ(c.reason, info.reason);
            EXPECT_FALSE(c.reason.empty());
        }
    }
}

TEST(StageDevice, ExplicitCudaWithoutADeviceIsAnError) {
    const CudaDeviceInfo info = probe_cuda_device(0);
    if (info.usable) GTEST_SKIP() << "a CUDA device is usable here";
    for (const char* text : {"cuda", "cuda:0"}) {
        try {
            choose_device(parse_device(text), 0);
            ADD_FAILURE() << text << " was accepted without a device";
        } catch (const ConfigError& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(text), std::string::npos) << what;
            EXPECT_NE(what.find(info.reason), std::string::npos) << what;
        }
    }
}

TEST(StageDevice, DeviceBeyondTheVisibleOnesIsAnError) {
    EXPECT_THROW(choose_device(parse_device("cuda:1023"), 0), ConfigError);
}

TEST(StageDevice, FallbackLineIsPrintedOncePerProcessBySpeakersOnly) {
    const CudaDeviceInfo info = probe_cuda_device(0);
    if (info.usable) GTEST_SKIP() << "a CUDA device is usable here: auto does not fall back";
    testing::internal::CaptureStderr();
    const detail::LoaderDevice quiet = detail::choose_loader_device("auto", true, 1, false);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    EXPECT_FALSE(quiet.pinned);
    testing::internal::CaptureStderr();
    const detail::LoaderDevice first = detail::choose_loader_device("auto", true, 0, true);
    detail::choose_loader_device("auto", true, 0, true);
    const std::string printed = testing::internal::GetCapturedStderr();
    EXPECT_EQ(printed, cpu_fallback_message(first.device) + "\n");
    EXPECT_NE(printed.find(info.reason), std::string::npos) << printed;
    EXPECT_NE(printed.find("on the CPU"), std::string::npos) << printed;
    EXPECT_FALSE(first.pinned);
    EXPECT_TRUE(first.device.fell_back);
}

TEST(StageDevice, ExplicitCpuPrintsNothingAndNeverPins) {
    testing::internal::CaptureStderr();
    const detail::LoaderDevice d = detail::choose_loader_device("cpu", true, 0, true);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    EXPECT_FALSE(d.pinned);
    EXPECT_FALSE(d.device.fell_back);
}

// The launcher's local rank (issue 39, bug 1): MPI launchers before srun's and torchrun's, whose
// variables an mpirun inside a Slurm batch script or a torchrun wrapper inherits.
TEST(StageDevice, LauncherLocalRankPrefersTheMpiLaunchersVariables) {
    const char* names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID",
                           "SLURM_LOCALID", "LOCAL_RANK"};
    for (const char* n : names) unsetenv(n);
    EXPECT_EQ(launcher_local_rank(), -1);
    setenv("LOCAL_RANK", "5", 1);
    EXPECT_EQ(launcher_local_rank(), 5);
    setenv("SLURM_LOCALID", "0", 1);  // a batch step's, inherited
    EXPECT_EQ(launcher_local_rank(), 0);
    setenv("MPI_LOCALRANKID", "3", 1);
    EXPECT_EQ(launcher_local_rank(), 3);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
    EXPECT_EQ(launcher_local_rank(), 2);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);  // not a number: the next one
    EXPECT_EQ(launcher_local_rank(), 3);
    setenv("MPI_LOCALRANKID", "", 1);
    EXPECT_EQ(launcher_local_rank(), 0);
    for (const char* n : names) unsetenv(n);
}
