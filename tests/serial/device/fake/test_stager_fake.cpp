// The DeviceStager on the CUDA test double (tests/fake_cuda): copies and "kernels" run late on
// per-stream threads, so each ordering rule of the stager is visible as wrong bytes:
//  - the host memory (ring slot) is released only after its copy ran;
//  - the consumer's stream waits for the copy;
//  - a device block is rewritten only after the consumer's kernels queued before its release;
//  - no context appears on a device the caller did not choose; polling leaves no error behind.
// Each test fails when the corresponding rule is broken in src/device (docs/gpu.md, "The CUDA
// test double", lists the one-line edits that show it).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "device/cuda_api.hpp"
#include "device/device_pool.hpp"
#include "device/device_stager.hpp"
#include "device/host_memory.hpp"
#include "fake_cuda.h"
#include "stage_test_util.hpp"

namespace {

using mpistage::DeviceChoice;
using mpistage::detail::DeviceLease;
using mpistage::detail::DevicePool;
using mpistage::detail::DeviceStager;
using mpistage::detail::HostBlock;
using mpistage::detail::HostSpan;
using mpistage::detail::StagedBatch;
using mpistage::detail::StagerOptions;

constexpr std::uint64_t kSeed = 18;
constexpr std::size_t kBytes = 64 * 1024;

DeviceChoice cuda(int index) {
    DeviceChoice c;
    c.cuda = true;
    c.index = index;
    return c;
}

// A "kernel" on the consumer's stream: checks that device memory holds the pattern of `step`
// when it runs (after `run_for`, the kernel's duration, during which it is reading).
struct KernelCheck {
    const std::byte* device = nullptr;
    std::size_t n = 0;
    std::uint64_t step = 0;
    std::chrono::milliseconds run_for{0};
    std::atomic<int>* mismatches = nullptr;
};

void check_kernel(void* p) {
    std::unique_ptr<KernelCheck> k(static_cast<KernelCheck*>(p));
    const bool before = stage_test::first_mismatch(kSeed, k->step, k->device, k->n) != k->n;
    std::this_thread::sleep_for(k->run_for);
    const bool after = stage_test::first_mismatch(kSeed, k->step, k->device, k->n) != k->n;
    if (before || after) k->mismatches->fetch_add(1);
}

void launch_check(cudaStream_t s, const StagedBatch& b, std::uint64_t step, std::size_t n,
                  std::chrono::milliseconds run_for, std::atomic<int>& mismatches) {
    auto* k = new KernelCheck{b.parts[0], n, step, run_for, &mismatches};
    ASSERT_EQ(cudaLaunchHostFunc(s, &check_kernel, k), cudaSuccess);
}

// A ring slot: pinned memory whose lease, when released, lets the "I/O thread" refill it at
// once with garbage (as the ring refills a returned slot with the next batch) and marks it free.
std::shared_ptr<void> slot_lease(HostBlock& slot, std::atomic<bool>& free) {
    std::byte* data = slot.data();
    const std::size_t n = slot.size_bytes();
    free = false;
    return std::shared_ptr<void>(data, [n, &free](void* p) {
        std::memset(p, 0x5A, n);
        free = true;
    });
}

void wait_free(const std::atomic<bool>& free) {
    while (!free) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

class StagerOnFake : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_EQ(mpistage_fake_cuda_active(), 1);
        mpistage_fake_cuda_set_copy_delay_us(3000);
        mpistage_fake_cuda_reset_contexts();
        (void)cudaGetLastError();
    }
    void TearDown() override { mpistage_fake_cuda_drain(); }
};

TEST_F(StagerOnFake, SlotIsReleasedOnlyAfterItsCopyAndConsumerWaitsForIt) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t consumer = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
    StagerOptions o;
    o.device = cuda(0);
    o.depth = 2;
    o.pool_buffers = 6;
    o.consumer_stream = consumer;
    std::atomic<int> mismatches{0};
    // The slots outlive the stager (its destructor lets queued releases run).
    std::vector<HostBlock> slots;
    std::vector<std::atomic<bool>> free(2);
    for (int i = 0; i < 2; ++i) {
        slots.emplace_back(kBytes, true);
        free[static_cast<std::size_t>(i)] = true;
    }
    {
        DeviceStager stager(o);
        for (std::uint64_t step = 0; step < 8; ++step) {
            HostBlock& slot = slots[step % 2];
            // As the ring: a slot is refilled only once its lease returned.
            wait_free(free[step % 2]);
            const std::size_t n = stage_test::fill_pattern(kSeed, step, slot.data(), kBytes);
            stager.submit({HostSpan{slot.data(), n, true}}, slot_lease(slot, free[step % 2]));
            StagedBatch b;
            ASSERT_TRUE(stager.take(b));
            launch_check(consumer, b, step, n, std::chrono::milliseconds(0), mismatches);
        }
        ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
    }
    EXPECT_EQ(mismatches.load(), 0) << "a kernel on the consumer's stream saw bytes other than "
                                       "its batch's (early slot release or missing stream wait)";
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    cudaStreamDestroy(consumer);
}

TEST_F(StagerOnFake, DeviceBlockIsNotReusedUnderARunningKernel) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t consumer = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
    StagerOptions o;
    o.device = cuda(0);
    o.depth = 1;
    o.pool_buffers = 2;  // the block of batch k is the one batch k + 1 gets (LIFO)
    o.consumer_stream = consumer;
    std::atomic<int> mismatches{0};
    std::vector<HostBlock> slots;  // one per step: only the device blocks are shared
    for (int i = 0; i < 6; ++i) slots.emplace_back(kBytes, true);
    {
        DeviceStager stager(o);
        for (std::uint64_t step = 0; step < 6; ++step) {
            HostBlock& slot = slots[step];
            const std::size_t n = stage_test::fill_pattern(kSeed, step, slot.data(), kBytes);
            stager.submit({HostSpan{slot.data(), n, true}}, std::shared_ptr<void>());
            StagedBatch b;
            ASSERT_TRUE(stager.take(b));
            // A 20 ms kernel reads the batch; the host drops the batch right after queuing it.
            launch_check(consumer, b, step, n, std::chrono::milliseconds(20), mismatches);
        }
        ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
    }
    EXPECT_EQ(mismatches.load(), 0)
        << "a batch's device block was overwritten while a queued kernel still read it";
    cudaStreamDestroy(consumer);
}

TEST_F(StagerOnFake, PageableSpansGoThroughPinnedMemory) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    StagerOptions o;
    o.device = cuda(0);
    std::atomic<int> mismatches{0};
    const unsigned long long pageable_before = mpistage_fake_cuda_pageable_copies();
    {
        DeviceStager stager(o);
        for (std::uint64_t step = 0; step < 4; ++step) {
            auto values = std::make_shared<std::vector<std::byte>>(kBytes);
            const std::size_t n = stage_test::fill_pattern(kSeed, step, values->data(), kBytes);
            stager.submit({HostSpan{values->data(), n, false}}, values);
            StagedBatch b;
            ASSERT_TRUE(stager.take(b));
            launch_check(nullptr, b, step, n, std::chrono::milliseconds(0), mismatches);
        }
        ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
        stager.drain();
        EXPECT_GT(stager.stats().bytes_copied, 0u);
    }
    EXPECT_EQ(mismatches.load(), 0);
    EXPECT_EQ(mpistage_fake_cuda_pageable_copies(), pageable_before)
        << "a copy from pageable memory (it would serialise with the device)";
}

TEST_F(StagerOnFake, NoContextOnADeviceTheCallerDidNotChoose) {
    // This thread never chose a device; the stager stages to cuda:1.
    {
        StagerOptions o;
        o.device = cuda(1);
        DeviceStager stager(o);
        HostBlock slot(kBytes, false);
        const std::size_t n = stage_test::fill_pattern(kSeed, 0, slot.data(), kBytes);
        stager.submit({HostSpan{slot.data(), n, false}}, std::shared_ptr<void>());
        StagedBatch b;
        ASSERT_TRUE(stager.take(b));
        stager.drain();
    }
    EXPECT_EQ(mpistage_fake_cuda_context_mask(), 1u << 1)
        << "contexts exist on devices (bit mask) other than the chosen cuda:1";
    EXPECT_EQ(mpistage_fake_cuda_implicit_contexts(0), 0u);
    int device = -1;
    ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(device, 0) << "the caller's (implicit) current device changed";
}

// Issue 39, bug 6: pinned blocks, device memory, events and streams made for cuda:1 and freed on
// a thread that never chose a device (a ring slot's last lease dropped by a trainer's thread, a
// tensor freed by Python's) are freed under their device's guard: the runtime's implicit
// initialisation would otherwise create a context on device 0 for cudaFreeHost / cudaFree.
TEST_F(StagerOnFake, FreesOnAThreadWithoutAContextCreateNoneOnDevice0) {
    HostBlock pinned;
    mpistage::detail::DeviceMemory memory;
    mpistage::detail::CudaEvent event;
    mpistage::detail::CudaStream stream;
    {
        const mpistage::detail::DeviceGuard guard(1);
        pinned = HostBlock(kBytes, true);
        memory = mpistage::detail::make_device_memory(kBytes);
        event = mpistage::detail::make_event();
        stream = mpistage::detail::make_stream();
    }
    EXPECT_EQ(pinned.device(), 1);
    EXPECT_EQ(memory.device(), 1);
    std::thread freeing([&] {
        pinned = HostBlock();
        memory.reset();
        event.reset();
        stream.reset();
    });
    freeing.join();
    EXPECT_EQ(mpistage_fake_cuda_implicit_contexts(0), 0u)
        << "a free on a thread without a context initialised device 0's";
    EXPECT_EQ(mpistage_fake_cuda_context_mask(), 1u << 1)
        << "contexts exist on devices (bit mask) other than cuda:1";
}

// Found on an H200: with the newest block lent first, the copy of the next batch went into the
// block of the batch just dropped, whose kernel had just been queued, so every copy waited for
// the kernel before it and copies and compute ran one after the other (gpu_bench overlap
// 11-34 %, 93-107 % with the oldest first; docs/gpu.md).
TEST_F(StagerOnFake, PoolLendsTheBlockGivenBackLongestAgo) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    const std::shared_ptr<DevicePool> pool = DevicePool::create(0, 3);
    std::shared_ptr<DeviceLease> a = pool->lend(4096), b = pool->lend(4096), c = pool->lend(4096);
    std::byte* const at_a = a->data();
    std::byte* const at_b = b->data();
    std::byte* const at_c = c->data();
    b.reset();  // given back first
    a.reset();
    c.reset();  // given back last: its consumer work is the newest
    EXPECT_EQ(pool->lend(4096)->data(), at_b);
    EXPECT_EQ(pool->lend(4096)->data(), at_a);
    EXPECT_EQ(pool->lend(4096)->data(), at_c);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Found on an H200: `drain` waited for the copies' `done` events only, and the runtime calls the
// host function that releases a batch's host memory after those completed, from its own thread.
TEST_F(StagerOnFake, DrainReturnsEveryHostLease) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    StagerOptions o;
    o.device = cuda(0);
    o.depth = 2;
    DeviceStager stager(o);
    HostBlock a(kBytes, true), b(kBytes, true);
    auto lease_a = std::make_shared<int>(0), lease_b = std::make_shared<int>(0);
    const std::weak_ptr<int> weak_a = lease_a, weak_b = lease_b;
    stager.submit({HostSpan{a.data(), kBytes, true}}, std::move(lease_a));
    stager.submit({HostSpan{b.data(), kBytes, true}}, std::move(lease_b));
    StagedBatch s;
    ASSERT_TRUE(stager.take(s));
    stager.drain();
    EXPECT_TRUE(weak_a.expired()) << "a taken batch's host memory was still held after drain()";
    EXPECT_TRUE(weak_b.expired()) << "a pending batch's host memory was still held after drain()";
}

TEST_F(StagerOnFake, PollingLeavesNoErrorBehind) {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    mpistage_fake_cuda_set_copy_delay_us(20000);  // copies still pending while polled
    StagerOptions o;
    o.device = cuda(0);
    o.depth = 2;
    DeviceStager stager(o);
    HostBlock a(kBytes, true), b(kBytes, true);
    stager.submit({HostSpan{a.data(), kBytes, true}}, std::shared_ptr<void>());
    stager.submit({HostSpan{b.data(), kBytes, true}}, std::shared_ptr<void>());  // polls copy 1
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess)
        << "cudaErrorNotReady left as the thread's last error after polling an event";
    StagedBatch s;
    while (stager.take(s)) {
    }
    stager.drain();
}

}  // namespace
