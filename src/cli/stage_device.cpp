// The last hop of `mpistage stage` (stage_device.hpp).
#include "cli/stage_device.hpp"

#include "stage/batch_parts.hpp"

namespace mpistage::cli {

namespace {

detail::StagerOptions staging_options(const Loader& loader) {
    detail::StagerOptions o;
    o.device = loader.stats().device;
    o.non_blocking = loader.options().non_blocking;
    o.depth = 2;
    o.pool_buffers = 3;  // two in flight, one being taken
    return o;
}

}  // namespace

BatchStaging::BatchStaging(const Loader& loader) : stager_(staging_options(loader)) {}

void BatchStaging::add(const HostBatch& batch) {
    if (stager_.pending() >= 2) take_one();
    stager_.submit(detail::part_spans(detail::batch_parts(batch)), batch.lease());
}

void BatchStaging::finish() {
    while (stager_.pending() > 0) take_one();
}

void BatchStaging::take_one() {
    detail::StagedBatch staged;
    stager_.take(staged);  // the device buffer returns to the pool when `staged` goes
}

}  // namespace mpistage::cli
