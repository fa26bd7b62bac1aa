// The CUDA runtime calls of the device component, each checked (cuda_api.hpp).
#include "device/cuda_api.hpp"

#include <string>

#include "mpistage/error.hpp"

#if MPISTAGE_DEVICE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mpistage::detail {

#if MPISTAGE_DEVICE_CUDA

namespace {

void check(cudaError_t rc, const std::string& what) {
    if (rc == cudaSuccess) return;
    (void)cudaGetLastError();  // clear a sticky error so later calls report their own
    throw CudaError("stage: " + what + " failed: " + cudaGetErrorString(rc) + " (" +
                    cudaGetErrorName(rc) + ")");
}

cudaStream_t stream_of(const CudaStream& s) {
    return static_cast<cudaStream_t>(s.get());
}
cudaEvent_t event_of(const CudaEvent& e) {
    return static_cast<cudaEvent_t>(e.get());
}

}  // namespace

bool built_with_cuda() noexcept {
    return true;
}

void StreamTraits::destroy(void* h) noexcept {
    cudaStreamDestroy(static_cast<cudaStream_t>(h));
}
void EventTraits::destroy(void* h) noexcept {
    cudaEventDestroy(static_cast<cudaEvent_t>(h));
}
void DeviceMemoryTraits::destroy(void* h) noexcept {
    cudaFree(h);
}

namespace {

// cuCtxGetCurrent / cuCtxSetCurrent (CUresult is an int-sized enum, CUcontext a pointer).
using CtxGetFn = int (*)(void**);
using CtxSetFn = int (*)(void*);
struct DriverContextCalls {
    CtxGetFn get = nullptr;
    CtxSetFn set = nullptr;
};

void* driver_entry(const char* symbol) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
    const cudaError_t rc =
        cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status);
#else
    // CUDA 12.0-12.4 (CMake requires >= 12.0): ByVersion does not exist yet; this one is
    // deprecated from 12.5 on and removed in 13.
    const cudaError_t rc = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &status);
#endif
    if (rc != cudaSuccess || status != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return fn;
}

const DriverContextCalls& driver_context_calls() {
    static const DriverContextCalls calls = [] {
        DriverContextCalls c;
        c.get = reinterpret_cast<CtxGetFn>(driver_entry("cuCtxGetCurrent"));
        c.set = reinterpret_cast<CtxSetFn>(driver_entry("cuCtxSetCurrent"));
        if (!c.get || !c.set) c = DriverContextCalls();
        return c;
    }();
    return calls;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
    if (device < 0) return;
    const DriverContextCalls& drv = driver_context_calls();
    if (drv.get) {
        void* context = nullptr;
        if (drv.get(&context) != 0) throw CudaError("stage: cuCtxGetCurrent failed");
        if (context != nullptr && current_device() == device) return;
        check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
        saved_context_ = context;  // nullptr: the caller had none, and gets none back
        restore_context_ = true;
        return;
    }
    const int current = current_device();
    if (current == device) return;
    check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
    previous_ = current;
}

DeviceGuard::~DeviceGuard() {
    if (restore_context_) {
        driver_context_calls().set(saved_context_);  // creates no context
    } else if (previous_ >= 0) {
        cudaSetDevice(previous_);
    }
}

int current_device() {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    return device;
}

int current_device_if_context() noexcept {
    const DriverContextCalls& drv = driver_context_calls();
    void* context = nullptr;
    if (!drv.get || drv.get(&context) != 0 || context == nullptr) return -1;
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return device;
}

CudaStream make_stream() {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return CudaStream(s, current_device());
}

CudaEvent make_event() {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    return CudaEvent(e, current_device());
}

DeviceMemory make_device_memory(std::size_t size_bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, size_bytes == 0 ? 1 : size_bytes),
          "cudaMalloc of " + std::to_string(size_bytes) + " bytes");
    return DeviceMemory(p, current_device());
}

void copy_to_device_async(void* dst, const void* src, std::size_t size_bytes,
                          const CudaStream& stream) {
    check(cudaMemcpyAsync(dst, src, size_bytes, cudaMemcpyHostToDevice, stream_of(stream)),
          "cudaMemcpyAsync of " + std::to_string(size_bytes) + " bytes host to device");
}

void copy_to_host_async(void* dst, const void* src, std::size_t size_bytes,
                        const CudaStream& stream) {
    check(cudaMemcpyAsync(dst, src, size_bytes, cudaMemcpyDeviceToHost, stream_of(stream)),
          "cudaMemcpyAsync of " + std::to_string(size_bytes) + " bytes device to host");
}

void record(const CudaEvent& event, const CudaStream& stream) {
    check(cudaEventRecord(event_of(event), stream_of(stream)), "cudaEventRecord");
}

void record_on(const CudaEvent& event, void* foreign_stream) {
    check(cudaEventRecord(event_of(event), static_cast<cudaStream_t>(foreign_stream)),
          "cudaEventRecord on the consumer's stream");
}

void stream_wait(const CudaStream& stream, const CudaEvent& event) {
    check(cudaStreamWaitEvent(stream_of(stream), event_of(event), 0), "cudaStreamWaitEvent");
}

void foreign_stream_wait(void* foreign_stream, const CudaEvent& event) {
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(foreign_stream), event_of(event), 0),
          "cudaStreamWaitEvent of the consumer's stream");
}

bool stream_capturing(void* foreign_stream) noexcept {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t rc =
        cudaStreamIsCapturing(static_cast<cudaStream_t>(foreign_stream), &status);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return rc == cudaErrorStreamCaptureImplicit;
    }
    return status != cudaStreamCaptureStatusNone;
}

void launch_host_func(const CudaStream& stream, void (*fn)(void*), void* data) {
    check(cudaLaunchHostFunc(stream_of(stream), fn, data), "cudaLaunchHostFunc");
}

void synchronize(const CudaEvent& event) {
    check(cudaEventSynchronize(event_of(event)), "cudaEventSynchronize");
}

void synchronize(const CudaStream& stream) {
    check(cudaStreamSynchronize(stream_of(stream)), "cudaStreamSynchronize");
}

bool completed(const CudaEvent& event) {
    const cudaError_t rc = cudaEventQuery(event_of(event));
    if (rc == cudaErrorNotReady) {
        (void)cudaGetLastError();  // polling is not an error: leave none behind
        return false;
    }
    check(rc, "cudaEventQuery");
    return true;
}

bool stream_idle(const CudaStream& stream) {
    const cudaError_t rc = cudaStreamQuery(stream_of(stream));
    if (rc == cudaErrorNotReady) {
        (void)cudaGetLastError();  // polling is not an error: leave none behind
        return false;
    }
    check(rc, "cudaStreamQuery");
    return true;
}

double elapsed_seconds(const CudaEvent& start, const CudaEvent& end) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, event_of(start), event_of(end)), "cudaEventElapsedTime");
    return static_cast<double>(ms) / 1e3;
}

bool synchronize_noexcept(const CudaStream& stream) noexcept {
    return cudaStreamSynchronize(stream_of(stream)) == cudaSuccess;
}

#else  // built without the CUDA runtime: nothing here is reachable through a DeviceChoice.

namespace {

[[noreturn]] void no_cuda(const char* what) {
    throw CudaError(std::string("stage: ") + what +
                    ": mpistage was built without the CUDA runtime (MPISTAGE_WITH_CUDA=OFF or "
                    "no CUDA toolkit found)");
}

}  // namespace

bool built_with_cuda() noexcept {
    return false;
}
void StreamTraits::destroy(void*) noexcept {}
void EventTraits::destroy(void*) noexcept {}
void DeviceMemoryTraits::destroy(void*) noexcept {}
DeviceGuard::DeviceGuard(int device) {
    if (device >= 0) no_cuda("cudaSetDevice");
}
DeviceGuard::~DeviceGuard() = default;
int current_device() {
    no_cuda("cudaGetDevice");
}
int current_device_if_context() noexcept {
    return -1;
}
CudaStream make_stream() {
    no_cuda("cudaStreamCreateWithFlags");
}
CudaEvent make_event() {
    no_cuda("cudaEventCreate");
}
DeviceMemory make_device_memory(std::size_t) {
    no_cuda("cudaMalloc");
}
void copy_to_device_async(void*, const void*, std::size_t, const CudaStream&) {
    no_cuda("cudaMemcpyAsync");
}
void copy_to_host_async(void*, const void*, std::size_t, const CudaStream&) {
    no_cuda("cudaMemcpyAsync");
}
void record(const CudaEvent&, const CudaStream&) {
    no_cuda("cudaEventRecord");
}
void record_on(const CudaEvent&, void*) {
    no_cuda("cudaEventRecord");
}
void stream_wait(const CudaStream&, const CudaEvent&) {
    no_cuda("cudaStreamWaitEvent");
}
void foreign_stream_wait(void*, const CudaEvent&) {
    no_cuda("cudaStreamWaitEvent");
}
bool stream_capturing(void*) noexcept {
    return false;
}
void launch_host_func(const CudaStream&, void (*)(void*), void*) {
    no_cuda("cudaLaunchHostFunc");
}
void synchronize(const CudaEvent&) {
    no_cuda("cudaEventSynchronize");
}
void synchronize(const CudaStream&) {
    no_cuda("cudaStreamSynchronize");
}
bool completed(const CudaEvent&) {
    no_cuda("cudaEventQuery");
}
bool stream_idle(const CudaStream&) {
    no_cuda("cudaStreamQuery");
}
double elapsed_seconds(const CudaEvent&, const CudaEvent&) {
    no_cuda("cudaEventElapsedTime");
}
bool synchronize_noexcept(const CudaStream&) noexcept {
    return true;
}

#endif

}  // namespace mpistage::detail
