#pragma once
/// @file
/// Which device a rank stages batches to (`device = auto | cpu | cuda[:N]`). Tolerates machines
/// without a GPU or with a too-old driver. No MPI: part of the stage component.
///
/// The library never changes the caller's current CUDA device behind its back: it makes its
/// own device current only inside its own CUDA calls and restores the caller's afterwards.

#include <string>

namespace mpistage {

/// What a `device` option asks for.
enum class DeviceMode { automatic, cpu, cuda };

/// A parsed `device` option: "auto", "cpu", "cuda" or "cuda:N".
struct DeviceSpec {
    DeviceMode mode = DeviceMode::automatic;
    /// Ordinal among the visible devices for "cuda:N"; −1 picks node-local rank mod count.
    int index = -1;
    /// The option as text ("auto", "cpu", "cuda", "cuda:1").
    std::string text() const;
};

/// Parses a `device` option. Not collective. @throws ConfigError naming the text for anything
/// but auto, cpu, cuda and cuda:N with 0 ≤ N < 1024.
DeviceSpec parse_device(const std::string& text);

/// What the CUDA runtime reports on this process.
struct CudaDeviceInfo {
    /// True when the library was built with the CUDA runtime and a device answered.
    bool usable = false;
    /// Visible devices (0 when not usable). The CUDA runtime applies `CUDA_VISIBLE_DEVICES`.
    int device_count = 0;
    /// Device this rank uses: node-local rank mod device_count (−1 when not usable).
    int device = -1;
    /// Why no device is usable ("built without the CUDA runtime", the runtime's own text, ...).
    std::string reason;
};

/// Queries the CUDA runtime once per process and picks `node_rank % device_count`. Not
/// collective; never throws: "no device" and "driver insufficient" give `usable = false` with
/// the runtime's text in `reason`; never changes the current device. Thread-safe.
CudaDeviceInfo probe_cuda_device(int node_rank);

/// The device a rank stages batches to.
struct DeviceChoice {
    /// CPU (batches stay in host memory, tensors are CPU tensors) or a CUDA device.
    bool cuda = false;
    /// CUDA ordinal among the visible devices; −1 for the CPU.
    int index = -1;
    /// True when `auto` was asked and no device is usable: the CPU path was taken.
    bool fell_back = false;
    /// Why the CPU is used (empty for an explicit `cpu` or a CUDA choice).
    std::string reason;
    /// "cpu" or "cuda:N".
    std::string name() const;
};

/// Picks the device of a rank. Not collective; never changes the current device.
/// auto: `cuda:(node_rank mod visible devices)` when a device is usable, else the CPU with
/// `fell_back` and the reason; cpu: the CPU; cuda: like auto but no device is an error;
/// cuda:N: device N, which must be visible.
/// @throws ConfigError when cuda or cuda:N was asked and that device is not usable.
DeviceChoice choose_device(const DeviceSpec& spec, int node_rank);

/// Counters of host → device staging (one stager, or one rank).
struct StagingStats {
    /// Batches handed to the consumer.
    unsigned long long batches = 0;
    /// Bytes copied host → device (0 on the CPU path, which copies nothing).
    unsigned long long bytes_copied = 0;
    /// Device time of the copies (from the batches' CUDA events), seconds.
    double copy_seconds = 0;
    /// Host time the consumer waited for copies to complete, seconds.
    double wait_seconds = 0;
    /// Host → device bandwidth of the copies in GB/s (1e9 bytes/s); 0 without copies.
    double h2d_gbps() const noexcept {
        return copy_seconds > 0 ? static_cast<double>(bytes_copied) / copy_seconds / 1e9 : 0.0;
    }
};

/// The one line printed when `auto` fell back to the CPU: names the reason and the remedy.
std::string cpu_fallback_message(const DeviceChoice& choice);

}  // namespace mpistage
