#pragma once
// The loader's device delivery (docs/gpu.md): the device kind agreed across ranks, and each
// batch copied from its ring slot to the device through the stream-ordered DeviceStager:
// `submit_batch` when the batch joins an agreement window (the copy runs ahead of the
// consumer), `take_batch` when `next()` hands it over (the consumer's stream waits on it).

#include "device/device_choice.hpp"
#include "device/device_stager.hpp"
#include "mpistage/batch.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"

namespace mpistage::detail {

/// Collective: each rank chooses its device (`choose_loader_device`), then the ranks agree:
/// CUDA on every rank; or the CPU on every rank, with one line from rank 0 when `auto` fell
/// back (naming the ranks without a usable device and the lowest one's reason); or, when a
/// rank without a device faces a rank that asked for CUDA explicitly, the same ConfigError on
/// every rank. A rank whose own choice throws (cuda asked, no device) makes every rank throw
/// its error. When every rank is on CUDA and ranks of one host (of this communicator: ranks of
/// the node outside it are not seen) resolve to one device by their node-local rank, rank 0
/// prints one note for the job (once per process, with `log_device_fallback`). The node split
/// (`Communicator::split_node`) is made only when some rank's choice falls back to the node rank
/// and `comm` does not have it yet: the need rides on the agreement of the choice, and the
/// split is made on every rank right after it.
/// @throws ConfigError, identical on every rank.
LoaderDevice agree_device(const Communicator& comm, const LoaderOptions& options);

/// Not collective: the stager of a loader on CUDA device `device` (consumer stream from
/// `options.delivery.cuda_stream`, up to `window` batches pending). @throws CudaError.
std::unique_ptr<DeviceStager> make_loader_stager(const DeviceChoice& device,
                                                 const LoaderOptions& options, std::size_t window);

/// Not collective: enqueues the copy of `host` (over a ring slot whose fixed parts are pinned
/// when `slot_pinned`; ragged parts go through pinned bounce memory) and gives the slot's lease
/// to the stager (released when the copy completed). Returns the batch's host-side shape:
/// index, valid and ragged offsets copied to host memory it owns. @throws CudaError.
HostBatch submit_batch(DeviceStager& stager, HostBatch host, bool slot_pinned);

/// Not collective: throws ConfigError when the consumer's stream is capturing a CUDA graph (or
/// the legacy stream is blocked by one; DeviceStager::consumer_capturing): the loader's copies,
/// events and cudaMalloc would invalidate the trainer's graph (issue 39, bug 8). The loader
/// makes every rank throw it (an agreed failure of the step). Asks nothing a capture forbids.
void refuse_capture(const DeviceStager& stager);

/// Not collective: at an epoch's end, waits for the epoch's copies (the stats count them) and
/// frees the pool's blocks beyond its base (DeviceStager::trim); nothing while the consumer's
/// stream captures (done at the next epoch's end). @throws CudaError.
void settle_epoch(DeviceStager& stager, StagingStats& stats);

/// Not collective: the oldest submitted batch on the device (the consumer's stream waits on
/// its copy) built on its `shape` from `submit_batch`. @throws CudaError.
HostBatch take_batch(DeviceStager& stager, HostBatch shape);

}  // namespace mpistage::detail
