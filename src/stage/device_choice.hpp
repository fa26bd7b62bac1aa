#pragma once
// Device choice of a rank: node-local rank mod visible device count (mpistage/device.hpp).

namespace mpistage::detail {

/// Not collective: when `requested` and a CUDA device is usable, makes device
/// `node_rank % device_count` current for the calling thread and returns true (host buffers
/// are then pinned); false otherwise. Never throws.
bool choose_pinned_device(bool requested, int node_rank);

}  // namespace mpistage::detail
