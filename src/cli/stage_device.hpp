#pragma once
// The last hop of `mpistage stage`: every batch staged to the loader's device (`--device`)
// through the stage component's DeviceStager, so the per-rank table can show the host →
// device bandwidth (internal to the CLI). The CLI computes nothing on the batches, so each is
// taken right after its copy: no overlap to gain, and no ring slot held past the batch (which
// would starve a loader with prefetch 1).

#include "mpistage/device.hpp"
#include "mpistage/loader.hpp"
#include "stage/device_stager.hpp"

namespace mpistage::cli {

/// Stages the batches of one loader. Not collective.
class BatchStaging {
public:
    /// On the loader's device (LoaderStats::device), with LoaderOptions::non_blocking.
    /// @throws CudaError.
    explicit BatchStaging(const Loader& loader);

    /// Copies `batch` to the device and waits for the copy (nothing on the CPU); its ring slot
    /// is released once the copy completed. @throws CudaError.
    void add(const HostBatch& batch);
    /// Counters so far (bytes copied and the device time of the copies).
    const StagingStats& stats() const noexcept { return stager_.stats(); }
    /// Where the batches go.
    const DeviceChoice& device() const noexcept { return stager_.device(); }

private:
    detail::DeviceStager stager_;
};

}  // namespace mpistage::cli
