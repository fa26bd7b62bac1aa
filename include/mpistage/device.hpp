#pragma once
/// @file
/// Which device a rank stages batches to (`device = auto | cpu | cuda[:N]`). Tolerates machines
/// without a GPU or with a too-old driver. No MPI: part of the device component.
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
    /// Ordinal among the visible devices for "cuda:N"; −1 lets `choose_device` pick (the
    /// caller's current device, else the node-local rank mod the visible devices).
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
    /// `local_rank` mod device_count, the argument of `probe_cuda_device` (−1 when not usable).
    int device = -1;
    /// Why no device is usable ("built without the CUDA runtime", the runtime's own text, ...).
    std::string reason;
};

/// Queries the CUDA runtime once per process and picks `local_rank % device_count` (a negative
/// `local_rank` counts as 0). Not collective; never throws: "no device" and "driver
/// insufficient" give `usable = false` with the runtime's text in `reason`; never changes the
/// current device and creates no context. Thread-safe.
CudaDeviceInfo probe_cuda_device(int local_rank);

/// The process's rank among the processes of its node in the whole job, as the launcher
/// exports it: the first of `OMPI_COMM_WORLD_LOCAL_RANK` (Open MPI's mpirun),
/// `MPI_LOCALRANKID` (MPICH and Intel MPI's Hydra), `PALS_LOCAL_RANKID` (Cray PALS),
/// `SLURM_LOCALID` (srun) and `LOCAL_RANK` (torchrun) that holds a non-negative integer; −1
/// when none does. The MPI launchers come first: an `mpirun` inside a Slurm batch script
/// inherits the batch step's `SLURM_LOCALID` (0 on every rank). Read on every call; not
/// collective; thread-safe as long as nobody changes the environment meanwhile.
int launcher_local_rank();

/// The calling thread's current CUDA device when a context is current on the thread (the
/// caller chose a device: `cudaSetDevice`, `torch.cuda.set_device`, a kernel launch...), else
/// −1; also −1 without the CUDA runtime or without the driver's `cuCtxGetCurrent`. Creates no
/// context. Not collective; thread-safe (it reads the calling thread's state).
int caller_current_device();

/// How a rank's device was chosen (docs/gpu.md, "Choosing the device").
enum class DeviceOrigin {
    /// The CPU: no CUDA device.
    cpu,
    /// `cuda:N` named it.
    requested,
    /// The calling thread's current device (`caller_current_device`): the trainer chose it.
    current,
    /// The node-local rank mod the visible devices: nobody asked for this device, so ranks of
    /// one node may share it (the loader then prints a note).
    local_rank,
};

/// The device a rank stages batches to.
struct DeviceChoice {
    /// CPU (batches stay in host memory, tensors are CPU tensors) or a CUDA device.
    bool cuda = false;
    /// CUDA ordinal among the visible devices; −1 for the CPU.
    int index = -1;
    /// True when `auto` was asked and no device is usable: the CPU path was taken.
    bool fell_back = false;
    /// How `index` was chosen (`DeviceOrigin::cpu` on the CPU).
    DeviceOrigin origin = DeviceOrigin::cpu;
    /// Why the CPU is used (empty for an explicit `cpu` or a CUDA choice).
    std::string reason;
    /// "cpu" or "cuda:N".
    std::string name() const;
};

/// Picks the device of a rank. Not collective; never changes the current device and creates
/// no context. Call it on the thread that will consume the batches (its current device counts).
/// - cuda:N: device N, which must be visible; it always wins.
/// - auto and cuda: the calling thread's current device when a context is current on it
///   (`caller_current_device`: the trainer already chose its GPU), else the node-local rank mod
///   the visible devices, where the node-local rank is `launcher_local_rank()` (the rank among
///   all processes of the node in the job, whatever communicator the loader was given) and,
///   when no launcher exports one, `fallback_local_rank` (the loader passes its
///   communicator's node rank, right only when that communicator holds every rank of the node;
///   −1 when not known: device 0, after which the loader makes its node split and chooses
///   again).
/// - auto with no usable device: the CPU with `fell_back` and the reason; cuda: an error.
/// - cpu: the CPU.
/// @throws ConfigError when cuda or cuda:N was asked and that device is not usable.
DeviceChoice choose_device(const DeviceSpec& spec, int fallback_local_rank);

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
