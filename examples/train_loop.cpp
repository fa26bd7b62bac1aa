// A minimal MPI trainer loop over mpistage batches: every rank takes the same number of steps,
// so the gradient allreduce in each step never hangs, and padded slots are masked out.
//
//   mpirun -np 4 ./example_train_loop train.h5
#include <mpi.h>

#include <cstdio>

#include "mpistage/mpistage.hpp"
#if MPISTAGE_HAVE_TORCH
#include "mpistage/torch.hpp"
#endif

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rc = 0;
    try {
        if (argc < 2) throw mpistage::ConfigError("usage: example_train_loop FILE.h5");
        mpistage::Communicator comm(MPI_COMM_WORLD);
        mpistage::Hdf5Options h5;
        h5.fields = {"images", "labels"};
        mpistage::Hdf5Source source(comm, argv[1], h5);
        mpistage::LoaderOptions options;
        options.plan.batch_size = 64;
        options.plan.shuffle = mpistage::Shuffle::local;
        options.plan.remainder = mpistage::Remainder::mask;
        options.pipeline.prefetch = 4;
        mpistage::Loader loader(comm, source, options);
        for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
            double label_sum = 0;
            std::uint64_t counted = 0;
            for (const mpistage::HostBatch& batch : loader.epoch(epoch)) {
#if MPISTAGE_HAVE_TORCH
                const mpistage::TorchBatch t = mpistage::to_torch(batch);
                const auto labels = t["labels"].to(torch::kFloat64).masked_select(t.valid);
                label_sum += labels.sum().item<double>();
                counted += static_cast<std::uint64_t>(labels.numel());
#else
                const auto* labels = batch.fields()[1].as<std::uint8_t>();
                for (std::size_t j = 0; j < batch.size(); ++j) {
                    if (batch.valid()[j]) {
                        label_sum += labels[j];
                        ++counted;
                    }
                }
#endif
                // A trainer's gradient allreduce would go here: same step count on every rank.
                double step_loss = 0;
                MPI_Allreduce(MPI_IN_PLACE, &step_loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            }
            MPI_Allreduce(MPI_IN_PLACE, &label_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            MPI_Allreduce(MPI_IN_PLACE, &counted, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
            if (comm.rank() == 0) {
                std::printf("epoch %llu: %llu samples, mean label %.4f\n",
                            static_cast<unsigned long long>(epoch),
                            static_cast<unsigned long long>(counted), label_sum / counted);
            }
        }
    } catch (const mpistage::Error& e) {
        std::fprintf(stderr, "example_train_loop: %s\n", e.what());
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
