#pragma once
/// @file
/// The batch type every loader yields (`Loader`, `StreamLoader`): `HostBatch` and its fields.

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

/// One field of a host batch. Fixed fields: `data` holds [B, sample_shape...] elements of
/// `info->dtype`, native order, row-major, `size_bytes = B × sample_bytes`. Ragged fields: `data`
/// holds the concatenated values and `offsets` B+1 byte offsets into it.
struct HostField {
    const FieldInfo* info = nullptr;
    const std::byte* data = nullptr;
    std::uint64_t size_bytes = 0;
    const std::int64_t* offsets = nullptr;

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

/// A batch in host memory (pinned when CUDA is usable). Shares ownership of one ring slot: the
/// slot returns to the ring when the last copy of the batch (and of any tensor made from its
/// `lease`) is gone. Thread safety: read-only access from any thread.
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
    /// Keeps the ring slot alive; tensors made over this batch's memory hold a copy.
    const std::shared_ptr<void>& lease() const noexcept { return lease_; }

private:
    std::uint64_t epoch_ = 0;
    std::uint64_t step_ = 0;
    std::size_t batch_size_ = 0;
    const std::int64_t* index_ = nullptr;
    const std::uint8_t* valid_ = nullptr;
    std::size_t num_valid_ = 0;
    std::vector<HostField> fields_;
    std::shared_ptr<void> lease_;
};

}  // namespace mpistage
