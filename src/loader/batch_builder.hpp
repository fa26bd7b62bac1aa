#pragma once
// The one place a HostBatch is assembled: from a ring slot (files: fixed and budget batches)
// or from memory a batch owns (streams). Both check the field layout the same way.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mpistage/loader.hpp"
#include "pipeline/ring.hpp"

namespace mpistage::detail {

/// Memory of a batch built from copied samples (streams): index and valid [slots], per field
/// the fixed data [slots, ...] or the ragged values with their slots + 1 offsets (offsets empty
/// for fixed fields). Owned by the batch through its lease.
struct BatchStore {
    std::vector<std::int64_t> index;
    std::vector<std::uint8_t> valid;
    std::vector<std::vector<std::byte>> data;
    std::vector<std::vector<std::int64_t>> offsets;
};

/// The batch of a filled ring `slot` of step `step` (plan numbering) of `epoch`; `lease`
/// returns the slot to its ring. Not collective, no copy.
/// @throws Error when the slot does not hold `fields` (an internal inconsistency).
HostBatch batch_from_slot(const std::vector<FieldInfo>& fields, const Slot& slot,
                          std::uint64_t epoch, std::uint64_t step, std::shared_ptr<void> lease);

/// The batch over `store` (which it keeps alive), with `num_valid` valid slots. Not
/// collective, no copy. @throws Error when `store` does not hold `fields`.
HostBatch batch_from_store(const std::vector<FieldInfo>& fields, std::shared_ptr<BatchStore> store,
                           std::uint64_t epoch, std::uint64_t step, std::size_t num_valid);

}  // namespace mpistage::detail
