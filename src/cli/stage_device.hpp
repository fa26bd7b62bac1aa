#pragma once
// The last hop of `mpistage stage`: every batch staged to the loader's device (`--device`)
// through the stage component's DeviceStager, one batch in flight ahead of the one taken, so
// the per-rank table can show the host → device bandwidth (internal to the CLI).

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

    /// Submits the copy of `batch` (its ring slot is held until the copy completed) and takes
    /// the oldest batch once two are pending. @throws CudaError.
    void add(const HostBatch& batch);
    /// Takes the batches still pending (end of an epoch). @throws CudaError.
    void finish();
    /// Counters so far (bytes copied and the device time of the copies).
    const StagingStats& stats() const noexcept { return stager_.stats(); }
    /// Where the batches go.
    const DeviceChoice& device() const noexcept { return stager_.device(); }

private:
    void take_one();
    detail::DeviceStager stager_;
};

}  // namespace mpistage::cli
