// Tensors over staged memory (libtorch builds only): they keep their slot and outlive the
// next batches; a CUDA choice gives tensors on that device without asking libtorch's CUDA
// hooks (which a CPU-only libtorch lacks).
#include <gtest/gtest.h>

#if MPISTAGE_STAGE_TEST_TORCH

#include <set>
#include <vector>

#include "stage/tensor/staged_tensors.hpp"
#include "stage_test_util.hpp"

using namespace mpistage;
using namespace mpistage::detail;
using namespace stage_test;

namespace {

constexpr std::uint64_t kSeed = 0xBADC0DEull;
constexpr std::size_t kSlotBytes = 4096;

}  // namespace

TEST(StageTensorsCpu, TensorsOutliveTheNextBatchesAndHoldTheirSlot) {
    StagePipeline p(pipeline_options(DeviceChoice{}, 3, kSlotBytes), 20,
                    [](std::uint64_t step, std::byte* data, std::size_t capacity) {
                        return fill_pattern(kSeed, step, data, capacity);
                    });
    std::vector<torch::Tensor> kept;
    PipelineBatch b;
    ASSERT_TRUE(p.next(b));
    kept.push_back(tensor_over(b.data, {static_cast<std::int64_t>(b.size_bytes)}, torch::kUInt8,
                               DeviceChoice{}, b.lease));
    b = PipelineBatch();  // only the tensor holds step 0's slot now
    std::set<const std::byte*> later;
    for (std::uint64_t step = 1; step < 20; ++step) {
        ASSERT_TRUE(p.next(b));
        EXPECT_EQ(b.step, step);
        EXPECT_EQ(first_mismatch(kSeed, step, b.data, b.size_bytes), b.size_bytes);
        later.insert(b.data);
    }
    const torch::Tensor& t = kept.front();
    EXPECT_EQ(t.device(), torch::Device(torch::kCPU));
    ASSERT_EQ(static_cast<std::size_t>(t.numel()), step_bytes(0, kSlotBytes));
    EXPECT_EQ(first_mismatch(kSeed, 0, static_cast<const std::byte*>(t.data_ptr()),
                             static_cast<std::size_t>(t.numel())),
              static_cast<std::size_t>(t.numel()));
    // The slot under the tensor was never lent again while the tensor lived.
    EXPECT_EQ(later.count(static_cast<const std::byte*>(t.data_ptr())), 0u);
    EXPECT_EQ(later.size(), 2u);  // the other two slots took turns
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
