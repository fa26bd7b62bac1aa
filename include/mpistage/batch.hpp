#pragma once
/// @file
/// The batch type the loader yields (over files or streams): `HostBatch` and its fields.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "mpistage/source.hpp"

namespace mpistage {

/// One field of a batch. Fixed fields: `data` holds [B, sample_shape...] elements of
/// `info->dtype`, native order, row-major, `size_bytes = B × sample_bytes`. Ragged fields: `data`
/// holds the concatenated values and `offsets` B+1 byte offsets into it.
/// On a CUDA batch (`HostBatch::device() >= 0`) the bytes are on the device: `device_data`
/// (and, ragged, `device_offsets`) point into device memory, `data` is nullptr; `offsets`
/// stays readable on the host (a copy).
struct HostField {
    const FieldInfo* info = nullptr;
    const std::byte* data = nullptr;
    std::uint64_t size_bytes = 0;
    const std::int64_t* offsets = nullptr;
    /// Device memory of the field on a CUDA batch (256-byte aligned), else nullptr.
    const std::byte* device_data = nullptr;
    /// Device copy of `offsets` (int64 [B+1]) of a ragged field on a CUDA batch, else nullptr.
    const std::int64_t* device_offsets = nullptr;

    /// The elements as `T` (e.g. `field.as<std::uint8_t>()` for a uint8 field): a typed view of
    /// `size_bytes / sizeof(T)` elements, valid while the batch (its lease) lives.
    /// @throws ConfigError when `sizeof(T)` differs from the field's element size.
    template <typename T>
    const T* as() const {
        if (sizeof(T) != dtype_size(info->dtype) && !(info->ragged && sizeof(T) == 1)) {
            throw ConfigError("field '" + info->name + "' has " + dtype_name(info->dtype) +
                              " elements; requested a " + std::to_string(sizeof(T)) + "-byte type");
        }
        return reinterpret_cast<const T*>(data);
    }
    /// Number of elements of `T` in the field (see `as`).
    template <typename T>
    std::size_t count() const {
        return static_cast<std::size_t>(size_bytes / sizeof(T));
    }
};

class HostBatch;

/// Not collective; thread-safe: for a CUDA batch the loader yielded, makes `cuda_stream` (a
/// `cudaStream_t`; nullptr: the legacy default stream) wait for the batch's copy (no host
/// wait) and fences the batch's device block on it: the block is reused only after the work
/// queued on `cuda_stream` when the batch's last holder is gone, as with torch's
/// `Tensor.record_stream` (the stream must outlive that point). Needed only to read a batch on
/// a stream other than the one `next()` handed it over on. No-op for a host batch.
/// @throws CudaError.
void use_on_stream(const HostBatch& batch, void* cuda_stream);

/// A batch, in host memory or on the loader's CUDA device (docs/gpu.md). A host batch shares
/// ownership of one ring slot: the slot returns to the ring when the last copy of the batch (and
/// of any tensor made from its `lease`) is gone. A CUDA batch (`device() >= 0`) owns a device
/// block instead (its ring slot went back as soon as its copy completed): its fields are in
/// device memory (`HostField::device_data`); `index()`, `valid()` and ragged offsets are host
/// copies, also on the device (`device_index()`, `device_valid()`). The batch's copy is ordered
/// before every kernel the consumer queues on `LoaderOptions::delivery.cuda_stream` after receiving
/// it; its device block is reused only after the work queued on that stream when the last copy of
/// the batch (and every DLPack tensor of it) was dropped. Thread safety: read-only access from
/// any thread.
class HostBatch {
public:
    HostBatch() = default;
    /// A batch over memory that `lease` keeps alive (the library builds batches with it; a
    /// trainer rarely needs to). `index` and `valid` have `size` entries, `num_valid` of them
    /// 1; `fields` point into the leased memory (fixed fields `size × sample_bytes` bytes,
    /// ragged fields `size + 1` offsets). Not checked here; nothing is copied.
    HostBatch(std::uint64_t epoch, std::uint64_t step, std::size_t size, const std::int64_t* index,
              const std::uint8_t* valid, std::size_t num_valid, std::vector<HostField> fields,
              std::shared_ptr<void> lease)
        : epoch_(epoch),
          step_(step),
          batch_size_(size),
          index_(index),
          valid_(valid),
          num_valid_(num_valid),
          fields_(std::move(fields)),
          lease_(std::move(lease)) {}
    /// Epoch this batch belongs to.
    std::uint64_t epoch() const noexcept { return epoch_; }
    /// Position of the batch in the epoch (0-based); equal on all ranks for the same step.
    std::uint64_t step() const noexcept { return step_; }
    /// Slots in the batch (B; with a batch budget it varies from batch to batch).
    std::size_t size() const noexcept { return batch_size_; }
    /// Global sample id of each slot (int64 [B]); kPaddingId (−1) for masked slots.
    const std::int64_t* index() const noexcept { return index_; }
    /// 1 where the slot holds a sample counted in this epoch, 0 for padding (uint8/bool [B]).
    const std::uint8_t* valid() const noexcept { return valid_; }
    /// Number of slots with valid = 1.
    std::size_t num_valid() const noexcept { return num_valid_; }
    /// Fields, in the source's order.
    const std::vector<HostField>& fields() const noexcept { return fields_; }
    /// Keeps the ring slot (host) or the device block (CUDA) alive; tensors made over this
    /// batch's memory hold a copy.
    const std::shared_ptr<void>& lease() const noexcept { return lease_; }
    /// CUDA device ordinal the fields are on; −1 for a host batch.
    int device() const noexcept { return device_; }
    /// On a CUDA batch: the index (int64 [B]) in device memory; nullptr on a host batch.
    const std::int64_t* device_index() const noexcept { return device_index_; }
    /// On a CUDA batch: the valid mask (uint8 [B]) in device memory; nullptr on a host batch.
    const std::uint8_t* device_valid() const noexcept { return device_valid_; }
    /// Library use (the loader's device staging): makes this a batch on CUDA device `device`
    /// with the given fields (device pointers set), host copies of index and valid, device
    /// index and valid, and the lease that owns all of them.
    void place_on_device(int device, std::vector<HostField> fields, const std::int64_t* index,
                         const std::uint8_t* valid, const std::int64_t* device_index,
                         const std::uint8_t* device_valid, std::shared_ptr<void> lease) {
        device_ = device;
        fields_ = std::move(fields);
        index_ = index;
        valid_ = valid;
        device_index_ = device_index;
        device_valid_ = device_valid;
        lease_ = std::move(lease);
    }

private:
    std::uint64_t epoch_ = 0;
    std::uint64_t step_ = 0;
    std::size_t batch_size_ = 0;
    const std::int64_t* index_ = nullptr;
    const std::uint8_t* valid_ = nullptr;
    std::size_t num_valid_ = 0;
    std::vector<HostField> fields_;
    std::shared_ptr<void> lease_;
    int device_ = -1;
    const std::int64_t* device_index_ = nullptr;
    const std::uint8_t* device_valid_ = nullptr;
};

}  // namespace mpistage
