// libtorch consumer of the installed package: the same epoch as the core consumer, read through
// mpistage::to_torch tensors. Usage: mpiexec -n 2 x WORK_DIR
#include "mpistage/torch.hpp"
#include "staging_check.hpp"

int main(int argc, char** argv) {
    return consumer::run(argc, argv, "torch consumer", [](const mpistage::HostBatch& batch,
                                                          consumer::Seen& seen) {
        const mpistage::TorchBatch t = mpistage::to_torch(batch);
        const torch::Tensor images = t["images"].contiguous();
        const torch::Tensor labels = t["labels"].contiguous();
        for (std::int64_t j = 0; j < t.index.size(0); ++j) {
            if (!t.valid[j].item<bool>()) continue;
            consumer::check_slot(seen, t.index[j].item<std::int64_t>(),
                                 images[j].data_ptr<std::uint8_t>(),
                                 labels[j].item<std::uint8_t>());
        }
    });
}
