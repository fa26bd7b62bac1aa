#pragma once
// Thin, checked wrappers of the CUDA runtime calls the device component makes: move-only owners
// of streams, events and device blocks (one UniqueHandle template, as DALI does), a current-
// device guard and the asynchronous host-to-device copy. The header names no CUDA type, so the
// stage's other files (and libtorch code) compile without the CUDA headers; in a build without
// the CUDA runtime every call that would need a device throws CudaError.

#include <cstddef>
#include <utility>

namespace mpistage::detail {

/// True when this build has the CUDA runtime (MPISTAGE_DEVICE_CUDA).
bool built_with_cuda() noexcept;

/// Makes `device` current for the calling thread when it is not already, and restores the
/// caller's current *context* on destruction (the driver's cuCtxGetCurrent/cuCtxSetCurrent,
/// reached through cudaGetDriverEntryPointByVersion, so libcuda is not linked): a thread that
/// had no context gets none back, and no context is ever created on a device the caller did
/// not choose (cudaSetDevice, used for the restore before, creates one since CUDA 12). Only
/// when the driver entry points are missing does it fall back to restoring the device with
/// cudaSetDevice. A negative device (the CPU) does nothing.
class DeviceGuard {
public:
    /// @throws CudaError when the device cannot be made current.
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int previous_ = -1;
    void* saved_context_ = nullptr;
    bool restore_context_ = false;
};

/// Move-only owner of one CUDA handle (an opaque pointer) made on `device`; `Traits::destroy`
/// frees it without throwing, under a DeviceGuard of that device, so a destructor running on a
/// thread with no context (or another device current) creates no context on device 0 (issue
/// 39, bug 6). When the device cannot be made current, the handle is leaked rather than freed
/// in a context of another device. A negative device (tests) destroys without a guard.
template <class Traits>
class UniqueHandle {
public:
    UniqueHandle() = default;
    UniqueHandle(void* h, int device) noexcept : handle_(h), device_(device) {}
    UniqueHandle(UniqueHandle&& o) noexcept
        : handle_(std::exchange(o.handle_, nullptr)), device_(o.device_) {}
    UniqueHandle& operator=(UniqueHandle&& o) noexcept {
        if (this != &o) {
            reset();
            handle_ = std::exchange(o.handle_, nullptr);
            device_ = o.device_;
        }
        return *this;
    }
    UniqueHandle(const UniqueHandle&) = delete;
    UniqueHandle& operator=(const UniqueHandle&) = delete;
    ~UniqueHandle() { reset(); }

    void* get() const noexcept { return handle_; }
    /// The device the handle belongs to.
    int device() const noexcept { return device_; }
    explicit operator bool() const noexcept { return handle_ != nullptr; }
    void reset() noexcept {
        if (handle_) {
            try {
                const DeviceGuard guard(device_);
                Traits::destroy(handle_);
            } catch (...) {
                // The device cannot be made current (a dead context): leak the handle.
            }
        }
        handle_ = nullptr;
    }

private:
    void* handle_ = nullptr;
    int device_ = -1;
};

struct StreamTraits {
    static void destroy(void* h) noexcept;
};
struct EventTraits {
    static void destroy(void* h) noexcept;
};
struct DeviceMemoryTraits {
    static void destroy(void* h) noexcept;
};

/// A cudaStream_t created with cudaStreamNonBlocking (no implicit sync with stream 0).
using CudaStream = UniqueHandle<StreamTraits>;
/// A cudaEvent_t with timing enabled.
using CudaEvent = UniqueHandle<EventTraits>;
/// A cudaMalloc block.
using DeviceMemory = UniqueHandle<DeviceMemoryTraits>;

/// The calling thread's current device (cudaGetDevice). @throws CudaError.
int current_device();
/// The calling thread's current device when a context is current on the thread (the driver's
/// cuCtxGetCurrent, then cudaGetDevice), else −1; −1 too without the CUDA runtime, without the
/// driver entry point or when the runtime fails (its error is cleared). Creates no context;
/// never throws.
int current_device_if_context() noexcept;
/// A non-blocking stream on the current device. @throws CudaError.
CudaStream make_stream();
/// An event (timing enabled) on the current device. @throws CudaError.
CudaEvent make_event();
/// `size_bytes` of device memory on the current device. @throws CudaError naming the size.
DeviceMemory make_device_memory(std::size_t size_bytes);

/// cudaMemcpyAsync host → device on `stream`. @throws CudaError naming the size.
void copy_to_device_async(void* dst, const void* src, std::size_t size_bytes,
                          const CudaStream& stream);
/// cudaMemcpyAsync device → host on `stream` (tests and benchmarks). @throws CudaError.
void copy_to_host_async(void* dst, const void* src, std::size_t size_bytes,
                        const CudaStream& stream);
/// cudaEventRecord. @throws CudaError.
void record(const CudaEvent& event, const CudaStream& stream);
/// cudaEventRecord on a stream the library does not own (a `cudaStream_t`; nullptr is the
/// legacy default stream). @throws CudaError.
void record_on(const CudaEvent& event, void* foreign_stream);
/// cudaStreamWaitEvent: later work on `stream` waits for `event`. @throws CudaError.
void stream_wait(const CudaStream& stream, const CudaEvent& event);
/// cudaStreamWaitEvent on a stream the library does not own (nullptr: the legacy default
/// stream): the consumer's later work waits for `event`; the host does not. @throws CudaError.
void foreign_stream_wait(void* foreign_stream, const CudaEvent& event);
/// True while `foreign_stream` (nullptr: the legacy default stream) is capturing a CUDA graph
/// (cudaStreamIsCapturing: active or invalidated), or is the legacy stream while a blocking
/// stream of the current device captures (cudaErrorStreamCaptureImplicit, cleared). Safe
/// during a capture: it queries, queues nothing, and invalidates none. False without the
/// runtime and on any other error (cleared). Never throws.
bool stream_capturing(void* foreign_stream) noexcept;
/// cudaLaunchHostFunc: `fn(data)` runs once the work queued on `stream` before it completed,
/// on a runtime thread; `fn` must make no CUDA call. @throws CudaError.
void launch_host_func(const CudaStream& stream, void (*fn)(void*), void* data);
/// cudaEventSynchronize: the host waits until the event completed. @throws CudaError.
void synchronize(const CudaEvent& event);
/// cudaStreamSynchronize: the host waits until all work queued on `stream`, host functions
/// included, completed. @throws CudaError.
void synchronize(const CudaStream& stream);
/// cudaEventQuery: true when completed. "Not ready" is cleared from the thread's last error
/// (as PyTorch does), so the caller's next launch check does not see it.
/// @throws CudaError for errors other than "not ready".
bool completed(const CudaEvent& event);
/// cudaStreamQuery: true when all work queued on `stream` completed, false while some is
/// queued or running ("not ready" cleared from the thread's last error, as in `completed`).
/// @throws CudaError for any other result (the stream's, or a sticky context error).
bool stream_idle(const CudaStream& stream);
/// Seconds between two completed events (cudaEventElapsedTime). @throws CudaError.
double elapsed_seconds(const CudaEvent& start, const CudaEvent& end);
/// cudaStreamSynchronize without throwing (destructors): false on error.
bool synchronize_noexcept(const CudaStream& stream) noexcept;

}  // namespace mpistage::detail
