// TorchStager (mpistage/torch.hpp): loader batches to device tensors through a DeviceStager.
#include <deque>

#include "mpistage/torch.hpp"
#include "stage/device_stager.hpp"
#include "stage/torch/torch_parts.hpp"

namespace mpistage {

struct TorchStager::Impl {
    std::unique_ptr<detail::DeviceStager> stager;
    std::deque<std::vector<detail::BatchPart>> shapes;  // of the pending batches
};

namespace {

detail::StagerOptions stager_options(const DeviceChoice& device, bool non_blocking,
                                     std::size_t depth) {
    detail::StagerOptions o;
    o.device = device;
    o.non_blocking = non_blocking;
    o.depth = depth;
    // Pending batches, plus a few the consumer keeps (the current one, one in backward).
    o.pool_buffers = depth + 3;
    o.allocator = detail::torch_device_allocator(device);
    return o;
}

}  // namespace

TorchStager::TorchStager(const Loader& loader, std::size_t depth)
    : TorchStager(loader.stats().device, loader.options().non_blocking, depth) {}

TorchStager::TorchStager(const DeviceChoice& device, bool non_blocking, std::size_t depth)
    : impl_(std::make_unique<Impl>()) {
    impl_->stager =
        std::make_unique<detail::DeviceStager>(stager_options(device, non_blocking, depth));
}

TorchStager::~TorchStager() = default;
TorchStager::TorchStager(TorchStager&&) noexcept = default;
TorchStager& TorchStager::operator=(TorchStager&&) noexcept = default;

void TorchStager::submit(const HostBatch& batch) {
    if (batch.device() >= 0) {
        throw ConfigError("torch: TorchStager::submit of a batch the loader already delivered on "
                          "cuda:" + std::to_string(batch.device()) + "; use to_torch(batch)");
    }
    std::vector<detail::BatchPart> parts = detail::batch_parts(batch);
    for (const auto& p : parts) (void)torch_dtype(p.dtype);  // fail before copying
    impl_->stager->submit(detail::part_spans(parts), batch.lease());
    impl_->shapes.push_back(std::move(parts));
}

TorchBatch TorchStager::take() {
    detail::StagedBatch staged;
    if (!impl_->stager->take(staged)) {
        throw ConfigError("torch: TorchStager::take with no batch submitted");
    }
    const std::vector<detail::BatchPart> parts = std::move(impl_->shapes.front());
    impl_->shapes.pop_front();
    return detail::torch_batch(parts, staged.parts, staged.device, staged.lease);
}

TorchBatch TorchStager::stage(const HostBatch& batch) {
    submit(batch);
    return take();
}

std::size_t TorchStager::pending() const noexcept {
    return impl_->stager->pending();
}
const DeviceChoice& TorchStager::device() const noexcept {
    return impl_->stager->device();
}
StagingStats TorchStager::stats() const noexcept {
    return impl_->stager->stats();
}

}  // namespace mpistage
