// mpirun -np 4 example_global_shuffle train.h5   (HDF5 datasets "images" and "labels")
#include <mpi.h>

#include <cstdio>
#include <mpistage/mpistage.hpp>  // core: no torch or CUDA headers
#if MPISTAGE_HAVE_TORCH
#include <mpistage/torch.hpp>  // target mpistage::torch
#endif

int main(int argc, char** argv) {
    // I/O threads call MPI only when the library provides MPI_THREAD_MULTIPLE; with less,
    // mpistage reads on the threads without MPI calls from them (docs/architecture.md).
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rc = 0;
    {  // every mpistage object is destroyed before MPI_Finalize
        try {
            if (argc < 2) throw mpistage::ConfigError("usage: example_global_shuffle FILE.h5");
            mpistage::Communicator comm(MPI_COMM_WORLD);  // collective: one MPI_Comm_dup
            mpistage::Hdf5Options h5;
            h5.fields = {"images", "labels"};
            mpistage::Hdf5Source source(comm, argv[1], h5);  // collective open (MPI-IO)
            mpistage::LoaderOptions options;
            options.plan.batch_size = 64;
            options.plan.shuffle_globally();  // like DistributedSampler(shuffle=True)
            options.plan.remainder = mpistage::Remainder::mask;
            {  // the loader (and its I/O threads) ends before the source is closed
                mpistage::Loader loader(comm, source, options);  // collective
                for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
                    std::uint64_t valid = 0;
                    for (const mpistage::HostBatch& batch : loader.epoch(epoch)) {  // equal counts
#if MPISTAGE_HAVE_TORCH
                        mpistage::TorchBatch t = mpistage::to_torch(batch);
                        // t["images"]: uint8 [64, 28, 28]; t.index: int64 [64]; t.valid: bool [64]
                        valid += static_cast<std::uint64_t>(t.valid.sum().item<std::int64_t>());
#else
                        valid += batch.num_valid();
#endif
                    }
                    valid = comm.allreduce_sum(valid);
                    if (comm.rank() == 0) {
                        std::printf("epoch %llu: %llu samples\n",
                                    static_cast<unsigned long long>(epoch),
                                    static_cast<unsigned long long>(valid));
                    }
                }
            }
            source.close();                   // collective close of the HDF5 file
        } catch (const mpistage::Error& e) {  // the same error on every rank
            std::fprintf(stderr, "example_global_shuffle: %s\n", e.what());
            rc = 2;
        }
    }
    MPI_Finalize();
    return rc;
}
