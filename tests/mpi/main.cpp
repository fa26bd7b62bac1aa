// The one shared MPI GoogleTest main (compiled once, linked into every tests/mpi/<area> binary):
// initialises MPI with threads, lets only rank 0 print, combines the result across ranks, and
// aborts the job on an uncaught exception instead of hanging the other ranks.
//
// `--mpistage_file=AREA/FILE.cpp` runs only the tests defined in that source file of the
// binary: tests/CMakeLists.txt registers every file of an area at its own rank counts. When the
// file holds no test in this build (all compiled out, e.g. the torch tests without libtorch)
// the job exits with 77, which ctest reports as skipped.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

namespace {

[[noreturn]] void abort_job() {
    std::cerr << "mpistage tests: uncaught exception; aborting the MPI job" << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::abort();
}

constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE for the registered tests

/// Removes `--mpistage_file=...` from argv; returns its value ("" when absent).
std::string take_file_option(int& argc, char** argv) {
    static const char kFlag[] = "--mpistage_file=";
    std::string file;
    int out = 0;
    for (int i = 0; i < argc; ++i) {
        if (std::strncmp(argv[i], kFlag, sizeof kFlag - 1) == 0) {
            file = argv[i] + sizeof kFlag - 1;
        } else {
            argv[out++] = argv[i];
        }
    }
    argc = out;
    return file;
}

/// The gtest filter selecting every test defined in the source file ending in `/file`; "" when
/// there is none. The same on every rank (every rank registers the same tests).
std::string filter_for_file(const std::string& file) {
    const std::string suffix = "/" + file;
    std::string filter;
    const auto* unit = testing::UnitTest::GetInstance();
    for (int i = 0; i < unit->total_test_suite_count(); ++i) {
        const auto* suite = unit->GetTestSuite(i);
        for (int j = 0; j < suite->total_test_count(); ++j) {
            const auto* info = suite->GetTestInfo(j);
            const std::string path = info->file();
            if (path.size() < suffix.size() ||
                path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
                continue;
            if (!filter.empty()) filter += ':';
            filter += std::string(info->test_suite_name()) + "." + info->name();
        }
    }
    return filter;
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    std::set_terminate(abort_job);
    const std::string file = take_file_option(argc, argv);
    testing::InitGoogleTest(&argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!file.empty()) {
        if (GTEST_FLAG_GET(filter) != "*") {
            if (rank == 0)
                std::cerr << "mpistage tests: --mpistage_file and --gtest_filter exclude each "
                             "other; give one"
                          << std::endl;
            MPI_Finalize();
            return 2;
        }
        const std::string filter = filter_for_file(file);
        if (filter.empty()) {
            if (rank == 0)
                std::cout << "mpistage tests: no test of " << file << " in this build" << std::endl;
            MPI_Finalize();
            return kSkipped;
        }
        GTEST_FLAG_SET(filter, filter);
    }
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
