// libtorch consumer of the installed package: the same epoch as the core consumer, read through
// mpistage::to_torch tensors. Usage: mpiexec -n 2 x WORK_DIR
#include "mpistage/torch.hpp"
#include "staging_check.hpp"

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rc = 0;
    try {
        if (argc != 2) throw mpistage::ConfigError("usage: x WORK_DIR");
        mpistage::Communicator comm(MPI_COMM_WORLD);
        mpistage::RawSource source = consumer::open_source(comm, argv[1]);
        mpistage::Loader loader(comm, source, consumer::loader_options());
        consumer::Seen seen;
        for (const mpistage::HostBatch& batch : loader.epoch(0)) {
            const mpistage::TorchBatch t = mpistage::to_torch(batch);
            const torch::Tensor images = t["images"].contiguous();
            const torch::Tensor labels = t["labels"].contiguous();
            const torch::Tensor index = t.index.contiguous();
            const torch::Tensor valid = t.valid.contiguous();
            for (std::int64_t j = 0; j < index.size(0); ++j) {
                if (!valid[j].item<bool>()) continue;
                consumer::check_slot(seen, index[j].item<std::int64_t>(),
                                     images[j].data_ptr<std::uint8_t>(),
                                     labels[j].item<std::uint8_t>());
            }
        }
        rc = consumer::report(MPI_COMM_WORLD, seen, "torch consumer");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "x: %s\n", e.what());
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
