// Core-only consumer of the installed package: stages one epoch of an IDX pair it writes
// itself and checks exactly-once delivery. Usage: mpiexec -n 2 x WORK_DIR
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
            const auto* images = reinterpret_cast<const unsigned char*>(batch.fields()[0].data);
            const auto* labels = reinterpret_cast<const unsigned char*>(batch.fields()[1].data);
            for (std::size_t j = 0; j < batch.size(); ++j) {
                if (!batch.valid()[j]) continue;
                consumer::check_slot(seen, batch.index()[j],
                                     images + j * consumer::kRows * consumer::kCols, labels[j]);
            }
        }
        rc = consumer::report(MPI_COMM_WORLD, seen, "core consumer");
    } catch (const mpistage::Error& e) {
        std::fprintf(stderr, "x: %s\n", e.what());
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
