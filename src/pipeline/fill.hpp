#pragma once
// Reading one step of an epoch plan into a ring slot.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "pipeline/ring.hpp"

namespace mpistage::detail {

/// Thrown by a source whose promised copy of a file no longer matches the file (the memory
/// tier's mapped pages after the file was truncated or rewritten): the file now holds other
/// bytes than were staged, so `fill_slot` does not read its fallback, which would serve them.
class StagedFileChanged final : public IoError {
public:
    using IoError::IoError;
};

/// Not collective (unless the source's reads are): fills `slot` with step `step` of `plan`
/// read from `source`: index, valid mask, fixed fields (padding zeroed), ragged values and
/// offsets. Thread-safe for distinct slots when the source's `read` is. With a `fallback`
/// (the file behind a memory tier, whose reads are promised), a failed read of the step is
/// made again from it, from scratch, unless it failed with `StagedFileChanged`.
/// @throws what the source's `read` throws (with a fallback: `StagedFileChanged`, or what
///         the fallback's throws).
void fill_slot(Slot& slot, const Source& source, const EpochPlan& plan, std::uint64_t step,
               const Source* fallback = nullptr);

/// Reads `count` samples `ids` (the step's non-padding ids in batch order) into `sink`, as
/// `Source::read` does.
using SampleReader =
    std::function<void(const std::uint64_t* ids, std::size_t count, BatchSink& sink)>;

/// `fill_slot` with the samples delivered by `read` instead of `Source::read` (the two-phase
/// reads deliver samples read by other ranks). Not collective unless `read` is.
/// @throws what `read` throws.
void fill_slot_with(Slot& slot, const std::vector<FieldInfo>& fields, const EpochPlan& plan,
                    std::uint64_t step, const SampleReader& read);

}  // namespace mpistage::detail
