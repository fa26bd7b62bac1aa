// The CUDA path of the device component (label cuda). Every test skips without a usable device;
// with one, the device bytes of every batch are compared with the bytes filled, on fresh data.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "device/cuda_api.hpp"
#include "device/device_stager.hpp"
#include "device/host_memory.hpp"
#include "mpistage/error.hpp"
#include "stage_test_util.hpp"

using namespace mpistage;
using namespace mpistage::detail;
using namespace stage_test;

// GTEST_SKIP returns from the test body, so this is a macro.
#define STAGE_REQUIRE_CUDA()                                                          \
    do {                                                                              \
        const CudaDeviceInfo info_ = probe_cuda_device(0);                            \
        if (!info_.usable) GTEST_SKIP() << "no usable CUDA device: " << info_.reason; \
    } while (0)

namespace {

constexpr std::size_t kSlotBytes = (std::size_t{1} << 20) + 4093;  // odd: tails are copied

std::uint64_t fresh_seed() {
    return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

DeviceChoice device0() {
    return choose_device(parse_device("cuda:0"), 0);
}

// The bytes at `device_data` on `device`, read back through the runtime after the work queued
// on the legacy default stream (the stager's consumer stream, which waits for each copy).
std::vector<std::byte> read_back(const DeviceChoice& device, const std::byte* device_data,
                                 std::size_t n) {
    DeviceGuard guard(device.index);
    std::vector<std::byte> out(n);
    CudaStream s = make_stream();
    CudaEvent after = make_event();
    record_on(after, nullptr);
    stream_wait(s, after);
    copy_to_host_async(out.data(), device_data, n, s);
    EXPECT_TRUE(synchronize_noexcept(s));
    return out;
}

// Stages `steps` batches of pattern bytes from pinned host blocks (depth 2, one block per
// batch in flight plus one being filled) and compares every batch's device bytes.
void run_and_check(bool non_blocking, std::uint64_t steps) {
    const std::uint64_t seed = fresh_seed();
    StagerOptions o;
    o.device = device0();
    o.non_blocking = non_blocking;
    o.depth = 2;
    o.pool_buffers = 4;
    DeviceStager stager(o);
    std::vector<HostBlock> blocks(3);
    {
        DeviceGuard guard(o.device.index);
        for (HostBlock& h : blocks) h = HostBlock(kSlotBytes, true);
    }
    EXPECT_TRUE(blocks[0].pinned());
    std::uint64_t bytes = 0;
    std::uint64_t taken = 0;
    const auto check_next = [&] {
        StagedBatch b;
        ASSERT_TRUE(stager.take(b));
        ASSERT_EQ(b.sizes[0], step_bytes(taken, kSlotBytes));
        const std::vector<std::byte> host = read_back(o.device, b.parts[0], b.sizes[0]);
        ASSERT_EQ(first_mismatch(seed, taken, host.data(), host.size()), host.size())
            << "step " << taken << " seed " << seed;
        bytes += b.sizes[0];
        ++taken;
    };
    for (std::uint64_t step = 0; step < steps; ++step) {
        // The block of step - 3 was taken (copied) two steps ago.
        HostBlock& h = blocks[step % blocks.size()];
        const std::size_t n = fill_pattern(seed, step, h.data(), kSlotBytes);
        stager.submit({{h.data(), n}}, nullptr);
        if (stager.pending() == o.depth) check_next();
    }
    while (stager.pending() > 0) check_next();
    stager.drain();
    EXPECT_EQ(taken, steps);
    EXPECT_EQ(stager.stats().bytes_copied, bytes);
    EXPECT_GT(stager.stats().copy_seconds, 0.0);
}

}  // namespace

TEST(StageCuda, EveryBatchOnTheDeviceEqualsItsBytesNonBlocking) {
    STAGE_REQUIRE_CUDA();
    run_and_check(true, 48);
}

TEST(StageCuda, EveryBatchOnTheDeviceEqualsItsBytesBlocking) {
    STAGE_REQUIRE_CUDA();
    run_and_check(false, 16);
}

TEST(StageCuda, TheCallersCurrentDeviceIsNeverChanged) {
    STAGE_REQUIRE_CUDA();
    const int count = probe_cuda_device(0).device_count;
    const int callers = count - 1;  // differs from the stage's device 0 when count > 1
    DeviceGuard callers_device(callers);
    ASSERT_EQ(current_device(), callers);
    const std::uint64_t seed = fresh_seed();
    StagerOptions o;
    o.device = device0();
    DeviceStager stager(o);
    EXPECT_EQ(current_device(), callers);
    std::vector<std::byte> host(kSlotBytes);
    for (std::uint64_t step = 0; step < 6; ++step) {
        const std::size_t n = fill_pattern(seed, step, host.data(), host.size());
        stager.submit({{host.data(), n}}, nullptr);
        EXPECT_EQ(current_device(), callers);
        StagedBatch b;
        ASSERT_TRUE(stager.take(b));
        EXPECT_EQ(current_device(), callers);
    }
}

TEST(StageCuda, HostMemoryIsReleasedOnlyOnceItsCopyCompleted) {
    STAGE_REQUIRE_CUDA();
    const DeviceChoice dev = device0();
    const std::size_t n = std::size_t{64} << 20;
    HostBlock block;
    {
        DeviceGuard guard(dev.index);
        block = HostBlock(n, true);
    }
    const std::uint64_t seed = fresh_seed();
    fill_pattern(seed, 0, block.data(), n);
    StagerOptions o;
    o.device = dev;
    auto stager = std::make_unique<DeviceStager>(o);
    auto lease = std::make_shared<int>(0);
    std::weak_ptr<int> weak = lease;
    stager->submit({{block.data(), n}}, std::move(lease));
    StagedBatch staged;
    ASSERT_TRUE(stager->take(staged));
    stager->drain();
    EXPECT_TRUE(weak.expired());  // copied: the host memory went back (a host function)
    const std::vector<std::byte> host = read_back(dev, staged.parts[0], n);
    EXPECT_EQ(first_mismatch(seed, 0, host.data(), n), n);

    // Destroyed with a copy in flight: the host memory is released only after it ended.
    auto lease2 = std::make_shared<int>(0);
    std::weak_ptr<int> weak2 = lease2;
    stager->submit({{block.data(), n}}, std::move(lease2));
    stager.reset();
    EXPECT_TRUE(weak2.expired());
}

TEST(StageCuda, PoolGrowsWhenBatchesAreKept) {
    STAGE_REQUIRE_CUDA();
    StagerOptions o;
    o.device = device0();
    o.depth = 1;
    o.pool_buffers = 2;
    DeviceStager s(o);
    std::vector<std::byte> host(4096, std::byte{7});
    std::vector<StagedBatch> kept(3);
    for (StagedBatch& k : kept) {
        s.submit({{host.data(), host.size()}}, nullptr);
        ASSERT_TRUE(s.take(k));
    }
    for (StagedBatch& k : kept) EXPECT_EQ(read_back(o.device, k.parts[0], host.size()), host);
    EXPECT_NE(kept[0].parts[0], kept[2].parts[0]);
}
