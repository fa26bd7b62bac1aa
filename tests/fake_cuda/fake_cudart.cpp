// The CUDA runtime calls of the test double (fake_cuda.h): the real signatures from
// cuda_runtime_api.h, implemented over fake_engine.hpp.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "fake_cuda.h"
#include "fake_engine.hpp"

using mpistage_fake::Allocation;
using mpistage_fake::Context;
using mpistage_fake::current_context;
using mpistage_fake::Engine;

namespace {

cudaError_t ret(cudaError_t rc) {
    if (rc != cudaSuccess) mpistage_fake::last_error() = static_cast<int>(rc);
    return rc;
}

// Makes sure the calling thread has a context (the runtime's implicit initialisation: device 0
// when none was chosen) and returns its device in `device`. `m` held.
cudaError_t ensure_context(Engine& e, int& device) {
    if (e.init_fails) return cudaErrorInsufficientDriver;
    if (e.sticky) return static_cast<cudaError_t>(e.sticky);
    if (e.device_count == 0) return cudaErrorNoDevice;
    device = e.context_or_implicit().device;
    return cudaSuccess;
}

cudaError_t host_alloc(void** p, std::size_t size, bool device_memory) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    int device = 0;
    if (const cudaError_t rc = ensure_context(e, device); rc != cudaSuccess) return ret(rc);
    if (e.unsafe_during_capture()) return ret(cudaErrorStreamCaptureUnsupported);
    if (const int rc = e.injected(device_memory ? "cudaMalloc" : "cudaHostAlloc")) {
        return ret(static_cast<cudaError_t>(rc));
    }
    std::size_t& in_use = e.device_bytes[static_cast<std::size_t>(device)];
    if (device_memory && e.device_memory_limit > 0 && in_use + size > e.device_memory_limit) {
        return ret(cudaErrorMemoryAllocation);
    }
    void* mem = std::malloc(size == 0 ? 1 : size);
    if (!mem) return ret(cudaErrorMemoryAllocation);
    std::memset(mem, 0xCD, size);  // fresh "device" memory is garbage, visibly
    Allocation a;
    a.size_bytes = size == 0 ? 1 : size;
    a.device_memory = device_memory;
    a.device = device;
    if (device_memory) in_use += a.size_bytes;
    e.allocations[reinterpret_cast<std::uintptr_t>(mem)] = a;
    *p = mem;
    return cudaSuccess;
}

cudaError_t free_alloc(void* p, bool device_memory) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    // As the runtime: a free on a thread with no current context initialises one (device 0's;
    // cudaFree(nullptr) is the classic way to create a context).
    int current = 0;
    if (e.sticky && p) {
        // The runtime returns the sticky error from a free too; the double still releases
        // the block (nothing queued runs any more) so that tests do not leak it.
        const auto it = e.allocations.find(reinterpret_cast<std::uintptr_t>(p));
        if (it != e.allocations.end()) {
            if (it->second.device_memory) {
                e.device_bytes[static_cast<std::size_t>(it->second.device)] -=
                    it->second.size_bytes;
            }
            e.allocations.erase(it);
            std::free(p);
        }
        return ret(static_cast<cudaError_t>(e.sticky));
    }
    if (const cudaError_t rc = ensure_context(e, current); rc != cudaSuccess) return ret(rc);
    if (!mpistage_fake::in_host_function() && e.unsafe_during_capture()) {
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (!p) return cudaSuccess;
    const auto it = e.allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == e.allocations.end() || it->second.device_memory != device_memory) {
        return ret(cudaErrorInvalidValue);
    }
    if (device_memory) {
        e.device_bytes[static_cast<std::size_t>(it->second.device)] -= it->second.size_bytes;
    }
    // cudaFree and cudaFreeHost synchronise: no queued copy can touch the block afterwards.
    // Inside a host function that wait would never end (the runtime's documented deadlock);
    // the double counts the call (Engine::get) and frees without it, so a test fails instead
    // of hanging.
    if (device_memory && !e.free_syncs) {  // freed at once: what is still queued reads poison
        std::memset(p, 0xDD, it->second.size_bytes);
        e.allocations.erase(reinterpret_cast<std::uintptr_t>(p));
        e.quarantine.push_back(p);
        return cudaSuccess;
    }
    if (!mpistage_fake::in_host_function()) e.drain(lk, device_memory ? it->second.device : -1);
    e.allocations.erase(reinterpret_cast<std::uintptr_t>(p));
    std::free(p);
    return cudaSuccess;
}

const char* error_name(cudaError_t rc) {
    switch (rc) {
        case cudaSuccess:
            return "cudaSuccess";
        case cudaErrorInvalidValue:
            return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation:
            return "cudaErrorMemoryAllocation";
        case cudaErrorInsufficientDriver:
            return "cudaErrorInsufficientDriver";
        case cudaErrorNoDevice:
            return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice:
            return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle:
            return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady:
            return "cudaErrorNotReady";
        case cudaErrorIllegalAddress:
            return "cudaErrorIllegalAddress";
        case cudaErrorIllegalState:
            return "cudaErrorIllegalState";
        case cudaErrorStreamCaptureUnsupported:
            return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated:
            return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureImplicit:
            return "cudaErrorStreamCaptureImplicit";
        case cudaErrorStreamCaptureIsolation:
            return "cudaErrorStreamCaptureIsolation";
        case cudaErrorStreamCaptureWrongThread:
            return "cudaErrorStreamCaptureWrongThread";
        default:
            return "cudaErrorUnknown";
    }
}

}  // namespace

extern "C" {

int mpistage_fake_cuda_active(void) {
    return 1;
}

unsigned mpistage_fake_cuda_context_mask(void) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    unsigned mask = 0;
    for (std::size_t d = 0; d < e.context_created.size(); ++d) {
        if (e.context_created[d]) mask |= 1u << d;
    }
    return mask;
}

void mpistage_fake_cuda_reset_contexts(void) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    e.context_created.assign(e.context_created.size(), false);
    e.implicit_inits.assign(e.implicit_inits.size(), 0);
    current_context() = nullptr;
}

unsigned long long mpistage_fake_cuda_implicit_contexts(int device) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    if (device < 0 || static_cast<std::size_t>(device) >= e.implicit_inits.size()) return 0;
    return e.implicit_inits[static_cast<std::size_t>(device)];
}

unsigned long long mpistage_fake_cuda_pageable_copies(void) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    return e.pageable_copies;
}

void mpistage_fake_cuda_set_free_syncs(int syncs) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    e.free_syncs = syncs != 0;
}

void mpistage_fake_cuda_set_copy_delay_us(unsigned delay_us) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    e.copy_delay = std::chrono::microseconds(delay_us);
}

void mpistage_fake_cuda_drain(void) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    e.drain(lk, -1);
}

unsigned long long mpistage_fake_cuda_calls_in_host_functions(void) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    return e.calls_in_host_functions;
}

void mpistage_fake_cuda_set_sticky_error(int rc) {
    Engine& e = Engine::get();
    {
        std::lock_guard<std::mutex> lk(e.m);
        if (rc != 0 && e.sticky == 0) ++e.sticky_generation;  // what is queued now never runs
        e.sticky = rc;
    }
    e.cv.notify_all();
}

void mpistage_fake_cuda_fail_next(const char* call, unsigned skip, int rc) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    if (rc == 0) {
        e.injections.erase(call);
    } else {
        e.injections[call] = mpistage_fake::Injection{skip, rc};
    }
}

void mpistage_fake_cuda_set_device_memory_limit(unsigned long long bytes) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    e.device_memory_limit = static_cast<std::size_t>(bytes);
}

unsigned long long mpistage_fake_cuda_device_bytes(int device) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    if (device < 0 || static_cast<std::size_t>(device) >= e.device_bytes.size()) return 0;
    return e.device_bytes[static_cast<std::size_t>(device)];
}

unsigned long long mpistage_fake_cuda_invalidated_captures(void) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    return e.invalidated_captures;
}

void mpistage_fake_cuda_fail_init(int fail) {
    Engine& e = Engine::get();
    std::lock_guard<std::mutex> lk(e.m);
    e.init_fails = fail != 0;
}

// ---- devices, contexts, errors ------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
    Engine& e = Engine::get();
    *count = e.init_fails ? 0 : e.device_count;
    if (e.init_fails) return ret(cudaErrorInsufficientDriver);
    return e.device_count == 0 ? ret(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    Engine& e = Engine::get();
    if (e.init_fails) return ret(cudaErrorInsufficientDriver);
    const Context* cur = current_context();
    *device = cur ? cur->device : 0;  // no context is created
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    Engine& e = Engine::get();
    if (e.init_fails) return ret(cudaErrorInsufficientDriver);
    if (device < 0 || device >= e.device_count) return ret(cudaErrorInvalidDevice);
    std::lock_guard<std::mutex> lk(e.m);
    // As CUDA >= 12: the device's primary context is created and made current.
    e.context_created[static_cast<std::size_t>(device)] = true;
    current_context() = &e.contexts[static_cast<std::size_t>(device)];
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    {
        Engine& e = Engine::get();
        std::lock_guard<std::mutex> lk(e.m);
        if (e.sticky) return static_cast<cudaError_t>(e.sticky);  // never cleared
    }
    const auto rc = static_cast<cudaError_t>(mpistage_fake::last_error());
    mpistage_fake::last_error() = 0;
    return rc;
}

cudaError_t cudaPeekAtLastError(void) {
    return static_cast<cudaError_t>(mpistage_fake::last_error());
}

const char* cudaGetErrorName(cudaError_t rc) {
    return error_name(rc);
}

const char* cudaGetErrorString(cudaError_t rc) {
    if (rc == cudaErrorInsufficientDriver) {
        return "CUDA driver version is insufficient for CUDA runtime version";
    }
    return error_name(rc);
}

cudaError_t cudaDriverGetVersion(int* v) {
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr, int device) {
    if (device < 0 || device >= Engine::get().device_count) return ret(cudaErrorInvalidDevice);
    *value = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    Engine& e = Engine::get();
    std::unique_lock<std::mutex> lk(e.m);
    int device = 0;
    if (const cudaError_t rc = ensure_context(e, device); rc != cudaSuccess) return ret(rc);
    if (e.unsafe_during_capture()) return ret(cudaErrorStreamCaptureUnsupported);
    e.drain(lk, device);
    return cudaSuccess;
}

}  // extern "C"

// ---- the driver's context calls, through cudaGetDriverEntryPointByVersion -----------------

namespace {

int fake_cu_ctx_get_current(void** ctx) {
    *ctx = current_context();
    return 0;
}

int fake_cu_ctx_set_current(void* ctx) {
    current_context() = static_cast<Context*>(ctx);  // creates nothing
    return 0;
}

}  // namespace

extern "C" cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int,
                                                        unsigned long long,
                                                        cudaDriverEntryPointQueryResult* status) {
    *fn = nullptr;
    if (std::strcmp(symbol, "cuCtxGetCurrent") == 0) {
        *fn = reinterpret_cast<void*>(&fake_cu_ctx_get_current);
    } else if (std::strcmp(symbol, "cuCtxSetCurrent") == 0) {
        *fn = reinterpret_cast<void*>(&fake_cu_ctx_set_current);
    }
    if (status) *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return *fn ? cudaSuccess : ret(cudaErrorSymbolNotFound);
}

#if CUDART_VERSION < 12050
// What src/device/cuda_api.cpp calls with a CUDA 12.0-12.4 toolkit.
extern "C" cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn,
                                               unsigned long long flags,
                                               cudaDriverEntryPointQueryResult* status) {
    return cudaGetDriverEntryPointByVersion(symbol, fn, 12000, flags, status);
}
#endif

// ---- memory -------------------------------------------------------------------------------

extern "C" {

cudaError_t cudaMalloc(void** p, size_t size) {
    return host_alloc(p, size, true);
}
cudaError_t cudaFree(void* p) {
    return free_alloc(p, true);
}
cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int) {
    return host_alloc(p, size, false);
}
cudaError_t cudaMallocHost(void** p, size_t size) {
    return host_alloc(p, size, false);
}
cudaError_t cudaFreeHost(void* p) {
    return free_alloc(p, false);
}

}  // extern "C"
