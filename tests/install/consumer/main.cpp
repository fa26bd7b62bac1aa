// Core-only consumer of the installed package: stages one epoch of an IDX pair it writes
// itself and checks exactly-once delivery. Usage: mpiexec -n 2 x WORK_DIR
#include "staging_check.hpp"

int main(int argc, char** argv) {
    return consumer::run(argc, argv, "core consumer", [](const mpistage::HostBatch& batch,
                                                         consumer::Seen& seen) {
        const auto* images = reinterpret_cast<const unsigned char*>(batch.fields()[0].data);
        const auto* labels = reinterpret_cast<const unsigned char*>(batch.fields()[1].data);
        for (std::size_t j = 0; j < batch.size(); ++j) {
            if (!batch.valid()[j]) continue;
            consumer::check_slot(seen, batch.index()[j],
                                 images + j * consumer::kRows * consumer::kCols, labels[j]);
        }
    });
}
