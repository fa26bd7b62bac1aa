// Which CUDA device a rank uses, whether its host buffers are pinned, and the log line when
// none is usable (mpistage/device.hpp). Nothing here changes the current device.
#include "device/device_choice.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "device/cuda_api.hpp"
#include "mpistage/error.hpp"

#if MPISTAGE_DEVICE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mpistage {

namespace {

constexpr int kMaxDeviceIndex = 1024;

// "(CUDA_VISIBLE_DEVICES=...)" when the variable is set: it hides devices from the runtime.
std::string visible_devices_note() {
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    return v ? std::string(" (CUDA_VISIBLE_DEVICES=\"") + v + "\")" : std::string();
}

}  // namespace

std::string DeviceSpec::text() const {
    switch (mode) {
        case DeviceMode::automatic:
            return "auto";
        case DeviceMode::cpu:
            return "cpu";
        case DeviceMode::cuda:
            break;
    }
    return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
}

DeviceSpec parse_device(const std::string& text) {
    DeviceSpec s;
    if (text == "auto") return s;
    if (text == "cpu") {
        s.mode = DeviceMode::cpu;
        return s;
    }
    s.mode = DeviceMode::cuda;
    if (text == "cuda") return s;
    const std::string prefix = "cuda:";
    const std::string digits = text.substr(text.rfind(prefix, 0) == 0 ? prefix.size() : 0);
    const bool numeric = text.rfind(prefix, 0) == 0 && !digits.empty() && digits.size() <= 4 &&
                         digits.find_first_not_of("0123456789") == std::string::npos;
    if (!numeric || std::stoi(digits) >= kMaxDeviceIndex) {
        throw ConfigError("device: '" + text + "' is not auto, cpu, cuda or cuda:N (0 <= N < " +
                          std::to_string(kMaxDeviceIndex) + ")");
    }
    s.index = std::stoi(digits);
    return s;
}

std::string DeviceChoice::name() const {
    return cuda ? "cuda:" + std::to_string(index) : "cpu";
}

int launcher_local_rank() {
    // MPI launchers first: an mpirun inside a Slurm batch script inherits the batch step's
    // SLURM_LOCALID (0 everywhere); torchrun's LOCAL_RANK last, as it may be inherited too.
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PALS_LOCAL_RANKID",
                             "SLURM_LOCALID", "LOCAL_RANK"}) {
        const char* v = std::getenv(name);
        if (!v || !*v || std::strlen(v) > 6) continue;
        if (std::string(v).find_first_not_of("0123456789") != std::string::npos) continue;
        return std::atoi(v);
    }
    return -1;
}

int caller_current_device() {
    return detail::current_device_if_context();
}

CudaDeviceInfo probe_cuda_device(int local_rank) {
    CudaDeviceInfo info;
#if MPISTAGE_DEVICE_CUDA
    static std::once_flag once;
    static int count = 0;
    static std::string reason;
    std::call_once(once, [] {
        // cudaGetDeviceCount creates no context and leaves the current device alone.
        const cudaError_t rc = cudaGetDeviceCount(&count);
        if (rc != cudaSuccess) {
            reason =
                std::string("CUDA runtime: ") + cudaGetErrorString(rc) + visible_devices_note();
            count = 0;
            (void)cudaGetLastError();  // clear the sticky error
        } else if (count == 0) {
            reason = "no CUDA-capable device is visible" + visible_devices_note();
        }
    });
    info.device_count = count;
    info.usable = count > 0;
    info.device = info.usable ? (local_rank < 0 ? 0 : local_rank) % count : -1;
    info.reason = reason;
#else
    (void)local_rank;
    info.reason = "mpistage was built without the CUDA runtime";
#endif
    return info;
}

DeviceChoice choose_device(const DeviceSpec& spec, int fallback_local_rank) {
    DeviceChoice c;
    if (spec.mode == DeviceMode::cpu) return c;
    const int launcher = launcher_local_rank();
    const CudaDeviceInfo info = probe_cuda_device(launcher >= 0 ? launcher : fallback_local_rank);
    if (spec.mode == DeviceMode::automatic && !info.usable) {
        c.fell_back = true;
        c.reason = info.reason;
        return c;
    }
    if (!info.usable) {
        throw ConfigError("device: " + spec.text() + " was asked but no CUDA device is usable: " +
                          info.reason + "; use --device auto or cpu to stage on the CPU");
    }
    if (spec.index >= info.device_count) {
        throw ConfigError("device: " + spec.text() + " was asked but only " +
                          std::to_string(info.device_count) + " CUDA device(s) are visible" +
                          visible_devices_note());
    }
    c.cuda = true;
    if (spec.index >= 0) {
        c.index = spec.index;
        c.origin = DeviceOrigin::requested;
        return c;
    }
    const int current = caller_current_device();
    if (current >= 0 && current < info.device_count) {
        c.index = current;
        c.origin = DeviceOrigin::current;
        return c;
    }
    c.index = info.device;
    c.origin = DeviceOrigin::local_rank;
    return c;
}

std::string cpu_fallback_message(const DeviceChoice& choice) {
    return "mpistage: device auto: no usable CUDA device (" + choice.reason +
           "); staging batches on the CPU (pass --device cpu / device = \"cpu\" to silence this)";
}

namespace detail {

LoaderDevice choose_loader_device(const std::string& device_option, bool pin_memory, int node_rank,
                                  bool speaker) {
    LoaderDevice d;
    d.device = choose_device(parse_device(device_option), node_rank);
    d.pinned = pin_memory && d.device.cuda;
    if (d.device.fell_back && speaker) {
        static std::once_flag once;
        std::call_once(once, [&] {
            std::fprintf(stderr, "%s\n", cpu_fallback_message(d.device).c_str());
            std::fflush(stderr);
        });
    }
    return d;
}

}  // namespace detail
}  // namespace mpistage
