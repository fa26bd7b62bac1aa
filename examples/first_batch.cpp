#include <cstdio>
#include <mpistage/mpistage.hpp>  // core: no torch or CUDA headers

// mpirun -np 2 example_first_batch train.h5   (or IDX files, or TFRecord files)
int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    {
        // Collective: detects the format, opens the files on every rank, agrees on errors.
        auto source = mpistage::open_source(MPI_COMM_WORLD, {argv + 1, argv + argc});
        // Collective: batches of 32 samples from this rank's shard, read ahead by one thread.
        mpistage::Loader loader(MPI_COMM_WORLD, *source, {});
        for (const mpistage::HostBatch& batch : loader.epoch(0)) {  // same count on every rank
            if (batch.step() > 0) continue;
            // e.g. images: uint8 [32, 28, 28] (25088 bytes), labels: uint8 [32] (32 bytes)
            for (const mpistage::HostField& field : batch.fields())
                std::printf("batch 0: %zu samples, %s: %llu bytes\n", batch.size(),
                            field.info->name.c_str(),
                            static_cast<unsigned long long>(field.size_bytes));
        }
    }
    MPI_Finalize();
}
