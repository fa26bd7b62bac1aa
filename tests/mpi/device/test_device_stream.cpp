// A Loader over a stream source delivering batches on a CUDA device (issue 38: the file path's
// device delivery for streams), on the CUDA test double: each batch is copied by the loader's
// stager and the consumer's stream waits on the copy, so a "kernel" queued right away on a
// non-default stream, with no host wait, sees every byte of its batch; streams of unequal
// length end together, every item once; a sticky CUDA error on one rank is the same CudaError
// on every rank (agreed at the next window), not a hang.
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "device_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;
using namespace device_test;

const std::vector<std::uint64_t> kLengths = {57, 0, 131, 9, 40};

/// Streams of `kLengths` items with the generated fields of device_test_util, keyed by the
/// item id (`stream_item_id`), so BatchKernel checks them by `HostBatch::index`.
CallableStreamSource generated_streams() {
    FieldInfo pixels{"pixels", DType::uint8, {kPixels}, static_cast<std::uint64_t>(kPixels), false};
    FieldInfo tokens{"tokens", DType::uint8, {}, 0, true};
    auto make = [](std::size_t s) {
        std::uint64_t p = 0;
        return CallableStreamSource::Generator([s, p](StreamSample& out) mutable {
            if (p >= kLengths[s]) return false;
            const auto id = static_cast<std::uint64_t>(stream_item_id(s, p++));
            out.fields.resize(2);
            out.fields[0].resize(static_cast<std::size_t>(kPixels));
            for (std::size_t i = 0; i < out.fields[0].size(); ++i) {
                out.fields[0][i] = std::byte{pixel(id, i)};
            }
            out.fields[1].resize(token_count(id));
            for (std::size_t i = 0; i < out.fields[1].size(); ++i) {
                out.fields[1][i] = std::byte{token(id, i)};
            }
            out.key = id;
            return true;
        });
    };
    return CallableStreamSource({pixels, tokens}, kLengths.size(), make, "generated streams");
}

std::vector<std::uint64_t> all_item_ids() {
    std::vector<std::uint64_t> ids;
    for (std::size_t s = 0; s < kLengths.size(); ++s) {
        for (std::uint64_t p = 0; p < kLengths[s]; ++p) {
            ids.push_back(static_cast<std::uint64_t>(stream_item_id(s, p)));
        }
    }
    return ids;
}

LoaderOptions cuda_options(StreamSharding sharding, void* stream) {
    LoaderOptions o;
    o.delivery.device = "cuda";
    o.delivery.cuda_stream = stream;
    o.plan.batch_size = 5;
    o.stream.sharding = sharding;
    o.stream.chunk_size = 4;
    o.stream.window_steps = 3;
    o.pipeline.io_threads = 1;
    o.safety.timeout = std::chrono::seconds(20);
    return o;
}

TEST(DeviceStream, StreamBatchesArriveOnTheDeviceStreamOrdered) {
    ASSERT_EQ(mpistage_fake_cuda_active(), 1);
    Communicator comm(MPI_COMM_WORLD);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const unsigned long long pageable_before = mpistage_fake_cuda_pageable_copies();
    const auto source = generated_streams();
    std::atomic<int> mismatches{0};
    for (auto sharding : {StreamSharding::chunk, StreamSharding::hash, StreamSharding::source}) {
        SCOPED_TRACE("sharding " + std::to_string(static_cast<int>(sharding)));
        Loader loader(comm, source, cuda_options(sharding, stream));
        ASSERT_TRUE(loader.stats().device.cuda);
        for (std::uint64_t e = 0; e < 2; ++e) {
            std::vector<std::uint64_t> ids;
            std::uint64_t steps = 0;
            for (const HostBatch& b : loader.epoch(e)) {
                ASSERT_EQ(b.device(), 0);
                ASSERT_EQ(b.fields()[0].data, nullptr) << "fields are on the device";
                // Queued at once, no host wait: the copy runs late on the double.
                launch_kernel(stream, b, std::chrono::microseconds(500), mismatches);
                for (std::size_t j = 0; j < b.size(); ++j) {
                    if (b.valid()[j]) ids.push_back(static_cast<std::uint64_t>(b.index()[j]));
                }
                ++steps;
            }
            std::vector<std::uint64_t> all = comm.allgatherv(ids);
            std::sort(all.begin(), all.end());
            EXPECT_EQ(all, all_item_ids()) << "epoch " << e << ": not every item exactly once";
            const auto counts = comm.allgather(steps);
            EXPECT_EQ(*std::min_element(counts.begin(), counts.end()),
                      *std::max_element(counts.begin(), counts.end()))
                << "ranks yielded different step counts";
        }
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_GT(loader.stats().staging.bytes_copied, 0u);
    }
    EXPECT_EQ(mismatches.load(), 0) << "a kernel on the consumer's stream saw bytes other than "
                                       "its batch's (a missing stream wait, or host memory "
                                       "released before its copy ran)";
    EXPECT_EQ(mpistage_fake_cuda_pageable_copies(), pageable_before)
        << "a copy straight from pageable memory (stream batches go through pinned bounce "
           "blocks)";
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
    cudaStreamDestroy(stream);
}

TEST(DeviceStream, OneRanksStickyErrorIsTheSameCudaErrorOnEveryRank) {
    ASSERT_EQ(mpistage_fake_cuda_active(), 1);
    Communicator comm(MPI_COMM_WORLD);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    const auto source = generated_streams();
    std::string error;
    const auto t0 = std::chrono::steady_clock::now();
    {
        Loader loader(comm, source, cuda_options(StreamSharding::chunk, nullptr));
        std::uint64_t steps = 0;
        try {
            for (const HostBatch& b : loader.epoch(0)) {
                (void)b;
                if (++steps == 2 && comm.rank() == 0) {
                    mpistage_fake_cuda_set_sticky_error(cudaErrorIllegalAddress);
                }
            }
        } catch (const CudaError& e) {
            error = e.what();
        }
    }
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mpistage_fake_cuda_set_sticky_error(0);
    EXPECT_NE(error.find("cudaErrorIllegalAddress"), std::string::npos)
        << "rank " << comm.rank() << " got '" << error << "'";
    const auto h = comm.allgather(fnv1a64(error));
    EXPECT_EQ(*std::min_element(h.begin(), h.end()), *std::max_element(h.begin(), h.end()))
        << "ranks ended with different errors; this one: " << error;
    EXPECT_LT(took, 20.0) << "ended by the watchdog's timeout, not by the agreed error";
}

}  // namespace
