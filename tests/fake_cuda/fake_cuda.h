#pragma once
// Control and inspection calls of the CUDA test double (libmpistage_fake_cudart.so, tests
// only). The double exports the CUDA runtime calls mpistage makes, with the real signatures
// (cuda_runtime_api.h); a test executable links it before libmpistage, so its definitions
// interpose on libcudart's (ELF symbol interposition, no switch in the library). Run scripts
// may instead preload it (LD_PRELOAD) into a binary linked with the real runtime.
//
// Semantics (what makes ordering bugs visible, README in this folder):
//  - "device" memory is host memory, poisoned with 0xCD when allocated;
//  - every cudaMemcpyAsync and host function (cudaLaunchHostFunc) runs LATE on a per-stream
//    worker thread: a copy waits `copy delay` (default 3 ms) before it reads its source, a host
//    function `host function delay` (default 0.5 ms; an event recorded just before it has
//    completed by then, as with the runtime, whose own thread calls host functions later);
//  - an event completes when its stream has finished the work queued before the record;
//  - cudaStreamWaitEvent is honoured (the stream's worker waits); the legacy default stream
//    synchronises with blocking streams of its device as the real one does;
//  - a context exists per device once a call needed it (cudaSetDevice creates the primary
//    context, as CUDA ≥ 12 does; a call needing a context with none current, frees and
//    stream/event destruction included, creates one on device 0 and counts it per device:
//    mpistage_fake_cuda_implicit_contexts); cuCtxGetCurrent / cuCtxSetCurrent come through
//    cudaGetDriverEntryPointByVersion;
//  - graph capture (cudaStreamBeginCapture / EndCapture / IsCapturing): work queued on a
//    capturing stream is captured, never run; an event recorded there is a graph node. As the
//    runtime documents, a potentially unsafe call (cudaMalloc, cudaHostAlloc, the frees,
//    cudaEventQuery/Synchronize, cudaStreamQuery/Synchronize, cudaDeviceSynchronize,
//    cudaMemcpy) made while a capture forbids it (this thread's, unless relaxed; any thread's
//    in global mode) fails with cudaErrorStreamCaptureUnsupported and invalidates it; so do the
//    legacy stream while a blocking stream captures (cudaErrorStreamCaptureImplicit), a
//    captured event queried or waited on from outside, and a capturing stream waiting on an
//    event from outside without cudaEventWaitExternal (cudaErrorStreamCaptureIsolation);
//    cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated;
//  - injected failures (mpistage_fake_cuda_fail_next) and a device memory limit;
//  - every failing call (cudaErrorNotReady included) sets the calling thread's last error.
//
// Environment (read once): MPISTAGE_FAKE_CUDA_DEVICES (visible devices, default 2),
// MPISTAGE_FAKE_CUDA_COPY_DELAY_US (default 3000), MPISTAGE_FAKE_CUDA_HOST_FUNC_DELAY_US
// (default 500), MPISTAGE_FAKE_CUDA_FAIL_RANK (the MPI rank,
// from OMPI_COMM_WORLD_RANK or PMI_RANK, whose cudaGetDeviceCount fails with
// cudaErrorInsufficientDriver: a node with a driver older than the runtime).

#ifdef __cplusplus
extern "C" {
#endif

/// 1: the double is the runtime this process calls (0 or an unresolved symbol otherwise).
int mpistage_fake_cuda_active(void);
/// Bit d is set when device d has a context (since the last reset).
unsigned mpistage_fake_cuda_context_mask(void);
/// Times a call on a thread with no current context made `device`'s context current by itself
/// (the runtime's implicit initialisation, always device 0: cudaFree, cudaFreeHost,
/// cudaStreamDestroy, cudaEventDestroy and every call needing a context do it), since the last
/// reset. A library call made for another device that shows here ran outside its DeviceGuard.
unsigned long long mpistage_fake_cuda_implicit_contexts(int device);
/// Forgets which devices have a context and the implicit-initialisation counts (tests start
/// from none), and the calling thread's current context.
void mpistage_fake_cuda_reset_contexts(void);
/// Host → device async copies whose source was pageable (not from cudaHostAlloc).
unsigned long long mpistage_fake_cuda_pageable_copies(void);
/// Sets the delay before each queued copy runs, microseconds.
void mpistage_fake_cuda_set_copy_delay_us(unsigned delay_us);
/// 0: cudaFree of device memory no longer synchronises; the block is poisoned (0xDD) and kept
/// mapped, so work still queued that reads it sees poison. 1 (default): the runtime's way.
void mpistage_fake_cuda_set_free_syncs(int syncs);
/// Blocks until every stream of every device finished its queued work.
void mpistage_fake_cuda_drain(void);
/// CUDA calls made from inside a host function (cudaLaunchHostFunc's callback, where the
/// runtime forbids them: a deadlock), since the process started. mpistage must make none.
unsigned long long mpistage_fake_cuda_calls_in_host_functions(void);
/// Sets a sticky context error (`rc`, a cudaError_t value such as cudaErrorIllegalAddress; 0
/// clears it): from now on every call needing the context returns it (frees too, which still
/// release their block), queued copies and host functions never run, and waits return at once
/// with it — what the runtime does after a kernel's illegal address.
void mpistage_fake_cuda_set_sticky_error(int rc);
/// Makes cudaGetDeviceCount (and every call needing a device) fail with
/// cudaErrorInsufficientDriver from now on (nonzero) or not (0): a driver older than the runtime.
/// mpistage probes the device once per process, so call it before the first loader.
void mpistage_fake_cuda_fail_init(int fail);
/// Makes the CUDA function named `call` ("cudaMalloc", "cudaHostAlloc", "cudaMemcpyAsync",
/// "cudaLaunchHostFunc", "cudaEventRecord") fail once with `rc` (a cudaError_t value) after
/// `skip` more calls that succeed; `rc` 0 cancels it. Not sticky: later calls succeed.
void mpistage_fake_cuda_fail_next(const char* call, unsigned skip, int rc);
/// Bytes cudaMalloc may hold per device (0, the default: no limit); beyond it cudaMalloc fails
/// with cudaErrorMemoryAllocation, as on a full device.
void mpistage_fake_cuda_set_device_memory_limit(unsigned long long bytes);
/// Bytes of cudaMalloc memory held on `device` now.
unsigned long long mpistage_fake_cuda_device_bytes(int device);
/// Captures invalidated so far (see graph capture above): mpistage must invalidate none.
unsigned long long mpistage_fake_cuda_invalidated_captures(void);

#ifdef __cplusplus
}
#endif
