// DLPack export of batch parts (mpistage/dlpack.hpp): shapes, dtypes, devices and ownership
// on a host batch built by hand, and the device pointers of a batch placed on a device.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "mpistage/dlpack.hpp"

namespace {

using namespace mpistage;

struct Fixture {
    FieldInfo image{"image", DType::float32, {2, 3}, 24, false};
    FieldInfo text{"text", DType::uint8, {}, 0, true};
    std::vector<float> pixels = std::vector<float>(4 * 6, 1.5f);
    std::vector<std::uint8_t> chars{1, 2, 3, 4, 5, 6, 7};
    std::vector<std::int64_t> offsets{0, 1, 3, 6, 7};
    std::vector<std::int64_t> index{10, 11, 12, -1};
    std::vector<std::uint8_t> valid{1, 1, 1, 0};
    std::shared_ptr<int> slot = std::make_shared<int>(0);

    HostBatch batch() {
        std::vector<HostField> fields(2);
        fields[0] = {&image, reinterpret_cast<const std::byte*>(pixels.data()), 4 * 24, nullptr};
        fields[1] = {&text, reinterpret_cast<const std::byte*>(chars.data()), chars.size(),
                     offsets.data()};
        return HostBatch(0, 0, 4, index.data(), valid.data(), 3, fields, slot);
    }
};

TEST(Dlpack, HostBatchPartsHaveTheirShapesDtypesAndHoldTheLease) {
    Fixture fx;
    HostBatch b = fx.batch();
    EXPECT_EQ(dlpack_names(b),
              (std::vector<std::string>{"image", "text", "text.offsets", "index", "valid"}));
    const long before = fx.slot.use_count();
    dlpack::DLManagedTensor* img = to_dlpack(b, "image");
    EXPECT_EQ(fx.slot.use_count(), before + 1);
    EXPECT_EQ(img->dl_tensor.data, fx.pixels.data());
    EXPECT_EQ(img->dl_tensor.device.device_type, dlpack::kDLCPU);
    ASSERT_EQ(img->dl_tensor.ndim, 3);
    EXPECT_EQ(img->dl_tensor.shape[0], 4);
    EXPECT_EQ(img->dl_tensor.shape[1], 2);
    EXPECT_EQ(img->dl_tensor.shape[2], 3);
    EXPECT_EQ(img->dl_tensor.dtype.code, dlpack::kDLFloat);
    EXPECT_EQ(img->dl_tensor.dtype.bits, 32);
    EXPECT_EQ(img->dl_tensor.strides, nullptr);
    dlpack::DLManagedTensor* off = to_dlpack(b, "text.offsets");
    EXPECT_EQ(off->dl_tensor.data, fx.offsets.data());
    EXPECT_EQ(off->dl_tensor.shape[0], 5);
    EXPECT_EQ(off->dl_tensor.dtype.code, dlpack::kDLInt);
    EXPECT_EQ(off->dl_tensor.dtype.bits, 64);
    dlpack::DLManagedTensor* text = to_dlpack(b, "text");
    EXPECT_EQ(text->dl_tensor.shape[0], 7);
    dlpack::DLManagedTensor* valid = to_dlpack(b, "valid");
    EXPECT_EQ(valid->dl_tensor.dtype.code, dlpack::kDLBool);
    EXPECT_EQ(valid->dl_tensor.dtype.bits, 8);
    b = HostBatch();  // the tensors keep the slot alive
    EXPECT_EQ(fx.slot.use_count(), before + 3);
    for (auto* t : {img, off, text, valid}) t->deleter(t);
    EXPECT_EQ(fx.slot.use_count(), 1);
    EXPECT_THROW(to_dlpack(fx.batch(), "nope"), ConfigError);
}

TEST(Dlpack, DeviceBatchExportsDevicePointers) {
    Fixture fx;
    HostBatch b = fx.batch();
    std::vector<std::byte> device_memory(512);  // stands for device memory
    std::vector<HostField> fields = b.fields();
    fields[0].device_data = device_memory.data();
    fields[0].data = nullptr;
    fields[1].device_data = device_memory.data() + 128;
    fields[1].device_offsets = reinterpret_cast<const std::int64_t*>(device_memory.data() + 256);
    fields[1].data = nullptr;
    const auto* dindex = reinterpret_cast<const std::int64_t*>(device_memory.data() + 384);
    const auto* dvalid = reinterpret_cast<const std::uint8_t*>(device_memory.data() + 448);
    b.place_on_device(1, fields, fx.index.data(), fx.valid.data(), dindex, dvalid, fx.slot);
    dlpack::DLManagedTensor* img = to_dlpack(b, "image");
    EXPECT_EQ(img->dl_tensor.device.device_type, dlpack::kDLCUDA);
    EXPECT_EQ(img->dl_tensor.device.device_id, 1);
    EXPECT_EQ(img->dl_tensor.data, device_memory.data());
    dlpack::DLManagedTensor* off = to_dlpack(b, "text.offsets");
    EXPECT_EQ(off->dl_tensor.data, device_memory.data() + 256);
    dlpack::DLManagedTensor* idx = to_dlpack(b, "index");
    EXPECT_EQ(idx->dl_tensor.data, dindex);
    for (auto* t : {img, off, idx}) t->deleter(t);
}

}  // namespace
