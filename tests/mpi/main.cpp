// The one shared MPI GoogleTest main: initialises MPI with threads, lets only rank 0 print,
// combines the result across ranks, and aborts the job on an uncaught exception instead of
// hanging the other ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <exception>
#include <iostream>

namespace {

class SilentListener : public testing::EmptyTestEventListener {};

[[noreturn]] void abort_job() {
    std::cerr << "mpistage tests: uncaught exception; aborting the MPI job" << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    std::set_terminate(abort_job);
    testing::InitGoogleTest(&argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank != 0) {
        auto& listeners = testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
    }
    int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
    int any_failed = 0;
    MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (local_failed) {
        std::cerr << "mpistage tests: failures on rank " << rank << std::endl;
    }
    MPI_Finalize();
    return any_failed;
}
