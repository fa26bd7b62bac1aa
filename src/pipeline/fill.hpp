#pragma once
// Reading one step of an epoch plan into a ring slot.

#include <cstdint>

#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "pipeline/ring.hpp"

namespace mpistage::detail {

/// Not collective (unless the source's reads are): fills `slot` with step `step` of `plan`
/// read from `source`: index, valid mask, fixed fields (padding zeroed), ragged values and
/// offsets. Thread-safe for distinct slots when the source's `read` is.
/// @throws what the source's `read` throws.
void fill_slot(Slot& slot, const Source& source, const EpochPlan& plan, std::uint64_t step);

}  // namespace mpistage::detail
