// The last hop of `mpistage stage` (stage_device.hpp).
#include "cli/stage_device.hpp"

#include "stage/batch_parts.hpp"

namespace mpistage::cli {

namespace {

detail::StagerOptions staging_options(const Loader& loader) {
    detail::StagerOptions o;
    o.device = loader.stats().device;
    o.non_blocking = loader.options().non_blocking;
    o.depth = 1;
    o.pool_buffers = 2;
    return o;
}

}  // namespace

BatchStaging::BatchStaging(const Loader& loader) : stager_(staging_options(loader)) {}

void BatchStaging::add(const HostBatch& batch) {
    stager_.submit(detail::part_spans(detail::batch_parts(batch)), batch.lease());
    detail::StagedBatch staged;
    stager_.take(staged);  // the device buffer returns to the pool when `staged` goes
}

}  // namespace mpistage::cli
