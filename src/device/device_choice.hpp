#pragma once
// The loader's use of the device choice (mpistage/device.hpp): which device, whether the ring
// is pinned, and the one log line when `auto` falls back to the CPU.

#include <string>

#include "mpistage/device.hpp"

namespace mpistage::detail {

/// Device and host-memory decision of one loader.
struct LoaderDevice {
    DeviceChoice device;
    /// Ring slots are allocated with cudaHostAlloc: `pin_memory` and a CUDA device.
    bool pinned = false;
};

/// Not collective: parses `device_option`, chooses the device (`choose_device`; `node_rank`,
/// the rank on the loader's node communicator, is the fallback local rank when no launcher
/// exports one) and decides pinning; never changes the current device. When `auto` falls back to
/// the CPU and `speaker` is true, prints `cpu_fallback_message` once per process to stderr.
/// @throws ConfigError for a bad option or an explicit CUDA device that is not usable.
LoaderDevice choose_loader_device(const std::string& device_option, bool pin_memory, int node_rank,
                                  bool speaker);

}  // namespace mpistage::detail
