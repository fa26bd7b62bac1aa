// Tensors over staged memory (libtorch builds only): they keep their host lease (the ring
// slot) alive; a CUDA choice gives tensors on that device without asking libtorch's CUDA
// hooks (which a CPU-only libtorch lacks).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#if MPISTAGE_STAGE_TEST_TORCH

#include <memory>
#include <vector>

#include "stage/device_stager.hpp"
#include "stage/tensor/staged_tensors.hpp"
#include "stage_test_util.hpp"

using namespace mpistage;
using namespace mpistage::detail;
using namespace stage_test;

namespace {

constexpr std::uint64_t kSeed = 0xBADC0DEull;
constexpr std::size_t kSlotBytes = 4096;

}  // namespace

TEST(StageTensorsCpu, ATensorOverAStagedCpuBatchHoldsItsHostLease) {
    // The CPU path copies nothing: the staged batch is the host memory (a ring slot in the
    // loader), and a tensor over it keeps that memory leased after the batch is gone.
    StagerOptions o;  // the CPU
    DeviceStager stager(o);
    std::vector<std::byte> host(kSlotBytes);
    const std::size_t n = fill_pattern(kSeed, 3, host.data(), host.size());
    auto lease = std::make_shared<int>(0);
    std::weak_ptr<int> weak = lease;
    stager.submit({{host.data(), n}}, std::move(lease));
    StagedBatch b;
    ASSERT_TRUE(stager.take(b));
    EXPECT_EQ(b.parts[0], host.data());
    torch::Tensor t =
        tensor_over(b.parts[0], {static_cast<std::int64_t>(n)}, torch::kUInt8, b.device, b.lease);
    b = StagedBatch();
    EXPECT_FALSE(weak.expired());
    EXPECT_EQ(t.device(), torch::Device(torch::kCPU));
    EXPECT_EQ(first_mismatch(kSeed, 3, static_cast<const std::byte*>(t.data_ptr()), n), n);
    t = torch::Tensor();
    EXPECT_TRUE(weak.expired());
}

TEST(StageTensorsCpu, LeaseIsReleasedWithTheLastTensor) {
    std::vector<float> host(12, 1.5f);
    auto lease = std::make_shared<int>(1);
    std::weak_ptr<int> weak = lease;
    torch::Tensor t = tensor_over(host.data(), {3, 4}, torch::kFloat32, DeviceChoice{}, lease);
    lease.reset();
    torch::Tensor view = t.select(0, 1);
    t = torch::Tensor();
    EXPECT_FALSE(weak.expired());
    EXPECT_FLOAT_EQ(view.sum().item<float>(), 6.0f);
    view = torch::Tensor();
    EXPECT_TRUE(weak.expired());
}

TEST(StageTensorsCpu, CudaChoiceGivesATensorOnThatDeviceWithoutTouchingIt) {
    DeviceChoice cuda;
    cuda.cuda = true;
    cuda.index = 1;
    std::vector<std::int64_t> storage(8);  // never dereferenced: only wrapped
    auto lease = std::make_shared<int>(2);
    std::weak_ptr<int> weak = lease;
    {
        torch::Tensor t = tensor_over(storage.data(), {2, 4}, torch::kInt64, cuda, lease);
        lease.reset();
        EXPECT_EQ(t.device(), torch::Device(torch::kCUDA, 1));
        EXPECT_EQ(t.sizes(), (std::vector<std::int64_t>{2, 4}));
        EXPECT_EQ(t.scalar_type(), torch::kInt64);
        EXPECT_FALSE(weak.expired());
    }
    EXPECT_TRUE(weak.expired());
}

TEST(StageTensorsCpu, TorchAllocatorOnlyForACudaLibtorch) {
    DeviceChoice cuda;
    cuda.cuda = true;
    cuda.index = 0;
    EXPECT_FALSE(torch_device_allocator(DeviceChoice{}));
    EXPECT_EQ(static_cast<bool>(torch_device_allocator(cuda)), torch::cuda::is_available());
}

#endif  // MPISTAGE_STAGE_TEST_TORCH
