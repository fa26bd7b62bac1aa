// The real Loader delivering batches on a CUDA device, on the CUDA test double: copies run
// late on per-stream threads, so an early ring-slot release, a missing stream wait or a device
// block reused under a running kernel shows as wrong bytes seen by a "kernel" queued on the
// consumer's stream; a context on a device the caller did not choose shows in the double's
// context mask. docs/gpu.md ("The CUDA test double") lists the one-line edits that show each.
#include <mpi.h>

#include <algorithm>

#include "device_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;
using namespace device_test;

constexpr std::uint64_t kSamples = 203;

LoaderOptions cuda_options(std::size_t prefetch, void* stream) {
    LoaderOptions o;
    o.delivery.device = "cuda";
    o.plan.batch_size = 5;
    o.plan.seed = 18;
    o.plan.shuffle = Shuffle::local;
    o.pipeline.prefetch = prefetch;
    o.pipeline.io_threads = 1;
    o.delivery.cuda_stream = stream;
    return o;
}

// Every valid id of the epoch on every rank, each exactly once across ranks.
void expect_exactly_once(const Communicator& comm, std::vector<std::int64_t> mine) {
    std::vector<std::uint64_t> ids(mine.begin(), mine.end());
    std::vector<std::uint64_t> all = comm.allgatherv(ids);
    std::sort(all.begin(), all.end());
    const std::uint64_t kept = kSamples / (5 * static_cast<std::uint64_t>(comm.size())) * 5 *
                               static_cast<std::uint64_t>(comm.size());
    EXPECT_EQ(all.size(), kept);
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "an id twice";
}

TEST(DeviceDelivery, BatchesArriveOnTheDeviceStreamOrdered) {
    ASSERT_EQ(mpistage_fake_cuda_active(), 1);
    Communicator comm(MPI_COMM_WORLD);
    comm.split_node();                        // collective: the node rank below
    const int device = comm.node_rank() % 2;  // the double shows 2 devices
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const unsigned long long pageable_before = mpistage_fake_cuda_pageable_copies();
    GeneratedSource source(kSamples);
    std::atomic<int> mismatches{0};
    std::uint64_t batches = 0;
    {
        Loader loader(comm, source, cuda_options(3, stream));
        ASSERT_TRUE(loader.stats().device.cuda);
        EXPECT_TRUE(loader.stats().pinned);
        for (std::uint64_t e = 0; e < 2; ++e) {
            std::vector<std::int64_t> ids;
            for (const HostBatch& b : loader.epoch(e)) {
                ASSERT_EQ(b.device(), device);
                ASSERT_EQ(b.fields()[0].data, nullptr) << "fields are on the device";
                // Queued right away, no host wait: the kernel must see the batch's bytes
                // although the copy runs late, and for its whole 2 ms, although later batches
                // are copied meanwhile and this one is dropped at once.
                launch_kernel(stream, b, std::chrono::microseconds(2000), mismatches);
                for (std::size_t j = 0; j < b.size(); ++j) {
                    if (b.valid()[j]) ids.push_back(b.index()[j]);
                }
                ++batches;
            }
            expect_exactly_once(comm, ids);
        }
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_GT(loader.stats().staging.bytes_copied, 0u);
    }
    EXPECT_GT(batches, 0u);
    EXPECT_EQ(mismatches.load(), 0) << "kernels on the consumer's stream saw bytes other than "
                                       "their batch's: an early slot release, a missing stream "
                                       "wait or a device block reused under a running kernel";
    EXPECT_EQ(mpistage_fake_cuda_pageable_copies(), pageable_before)
        << "a copy from pageable memory (ragged fields must be staged from pinned memory)";
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "a CUDA error left behind on the caller";
    cudaStreamDestroy(stream);
}

TEST(DeviceDelivery, NoContextOnADeviceTheCallerDidNotChoose) {
    Communicator comm(MPI_COMM_WORLD);
    mpistage_fake_cuda_drain();
    mpistage_fake_cuda_reset_contexts();  // this thread has no current context either
    GeneratedSource source(kSamples);
    std::atomic<int> mismatches{0};
    {
        LoaderOptions o = cuda_options(2, nullptr);
        o.delivery.device = "cuda:1";
        Loader loader(comm, source, o);
        for (const HostBatch& b : loader.epoch(0)) ASSERT_EQ(b.device(), 1);
    }
    mpistage_fake_cuda_drain();
    EXPECT_EQ(mpistage_fake_cuda_context_mask(), 1u << 1)
        << "contexts (bit mask) on devices other than the chosen cuda:1";
    EXPECT_EQ(mpistage_fake_cuda_implicit_contexts(0), 0u)
        << "a CUDA call (a free?) ran on a thread without a context, outside its guard";
    EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
