#pragma once
// Shared by to_torch and TorchStager: a TorchBatch from the parts of a loader batch.

#include <cstddef>
#include <memory>
#include <vector>

#include "mpistage/torch.hpp"
#include "stage/batch_parts.hpp"
#include "stage/tensor/staged_tensors.hpp"

namespace mpistage::detail {

/// Tensors over `data[i]` (one pointer per part, on `device`) shaped as `parts`, each holding
/// `lease`. @throws ConfigError for a dtype without a torch equivalent.
TorchBatch torch_batch(const std::vector<BatchPart>& parts, const std::vector<std::byte*>& data,
                       const DeviceChoice& device, const std::shared_ptr<void>& lease);

/// The host pointers of `parts` (the CPU path: no copy).
std::vector<std::byte*> host_pointers(const std::vector<BatchPart>& parts);

}  // namespace mpistage::detail
