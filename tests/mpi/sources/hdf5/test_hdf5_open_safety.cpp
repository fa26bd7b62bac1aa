/// @file
/// Collective safety of opening an HDF5 source (issue "Collective safety"): ranks that see
/// different files, and paths that are not regular files, end with the same error on every rank
/// instead of a hang inside the collective H5Fopen.

#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../../hdf5_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"

namespace {

using mpistage::Communicator;
using mpistage::ConfigError;
using mpistage::Hdf5Options;
using mpistage::Hdf5Source;

/// Rank 0 writes one labels file per rank: same name pattern, same size, one value differs on
/// the ranks listed in `odd`.
std::vector<std::string> write_per_rank_files(const h5t::TempDir& dir, int world,
                                              const std::vector<int>& odd) {
    std::vector<std::string> paths;
    bool ok = true;
    for (int r = 0; r < world; ++r) {
        paths.push_back(dir.file("labels_" + std::to_string(r) + ".h5"));
        if (h5t::rank() != 0) continue;
        std::vector<std::int64_t> labels(100);
        for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i);
        for (int o : odd) {
            if (o == r) labels[1] = 12345;  // not sample 0, N/2 or N-1
        }
        ok = ok && h5t::write_hdf5(paths.back(), {{"labels", H5T_STD_I64LE, H5T_NATIVE_INT64,
                                                   {labels.size()}, labels.data(), {}, 0}});
    }
    EXPECT_TRUE(h5t::all_true(h5t::bcast(ok ? "1" : "0") == "1")) << "writing the test files";
    return paths;
}

TEST(Hdf5OpenSafety, RanksSeeingDifferentFilesGetTheSameConfigError) {
    Communicator comm(MPI_COMM_WORLD);
    h5t::TempDir dir;
    const int world = comm.size();
    if (world == 1) {
        // One rank cannot disagree with itself: the same file opens fine.
        const auto paths = write_per_rank_files(dir, 1, {});
        Hdf5Source src(comm, paths[0], Hdf5Options{{"labels"}});
        EXPECT_EQ(src.num_samples(), 100u);
        return;
    }
    // The last rank sees another file than the others (as a node-local copy that differs).
    const auto paths = write_per_rank_files(dir, world, {world - 1});
    const std::string mine = h5t::rank() == world - 1 ? paths[world - 1] : paths[0];
    H5T_EXPECT_SAME_ERROR(ConfigError, Hdf5Source(comm, mine, Hdf5Options{{"labels"}}),
                          "hdf5: ranks disagree", "on rank " + std::to_string(world - 1),
                          "same, unchanging file");
}

TEST(Hdf5OpenSafety, SameContentsAtDifferentPathsOpen) {
    // Identity is the contents, not the path string: two identical copies are the same data.
    Communicator comm(MPI_COMM_WORLD);
    h5t::TempDir dir;
    const auto paths = write_per_rank_files(dir, comm.size(), {});
    Hdf5Source src(comm, paths[static_cast<std::size_t>(comm.rank())], Hdf5Options{{"labels"}});
    EXPECT_EQ(src.num_samples(), 100u);
}

TEST(Hdf5OpenSafety, FifoIsAConfigErrorNotAHang) {
    Communicator comm(MPI_COMM_WORLD);
    h5t::TempDir dir;
    const std::string fifo = dir.file("data.h5");
    int made = 0;
    if (h5t::rank() == 0) made = ::mkfifo(fifo.c_str(), 0600) == 0 ? 1 : 0;
    MPI_Bcast(&made, 1, MPI_INT, 0, MPI_COMM_WORLD);
    ASSERT_EQ(made, 1) << "mkfifo failed";  // same on every rank
    H5T_EXPECT_SAME_ERROR(ConfigError, Hdf5Source(comm, fifo, Hdf5Options{{"labels"}}),
                          "FIFO", fifo, "only regular files");
}

TEST(Hdf5OpenSafety, DirectoryIsAConfigError) {
    Communicator comm(MPI_COMM_WORLD);
    h5t::TempDir dir;
    H5T_EXPECT_SAME_ERROR(ConfigError, Hdf5Source(comm, dir.path(), Hdf5Options{{"labels"}}),
                          "a directory", dir.path());
}

}  // namespace
