// Hdf5Source errors, identical on every rank (BUGS H6, H7): missing files (on all or one rank),
// non-HDF5 files, missing datasets and filters, mismatched or empty dataspaces, bad options.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <string>

#include "test_data.hpp"
#include "h5t_checks.hpp"
#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
#include "hdf5_test_files.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"

using h5src::fields_opt;
using h5src::H2File;
using h5src::kDir;
using mpistage::Communicator;
using mpistage::Hdf5Options;
using mpistage::Hdf5Source;

TEST(Hdf5Errors, MissingFileIsIoErrorOnEveryRank) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = kDir + "no_such_file.hdf5";
    H5T_EXPECT_SAME_ERROR(mpistage::IoError, Hdf5Source(comm, path), "no_such_file.hdf5");
    comm.free();
}

// Only the last rank names a missing file: every rank still gets the same IoError (the check
// is agreed before the collective open), nobody waits in H5Fopen.
TEST(Hdf5Errors, MissingFileOnOneRankIsIoErrorOnEveryRank) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const bool bad = h5t::rank() == h5t::size() - 1;
    const std::string path = kDir + (bad ? "missing_on_one_rank.hdf5" : "chunked.hdf5");
    H5T_EXPECT_SAME_ERROR(mpistage::IoError, Hdf5Source(comm, path), "missing_on_one_rank.hdf5");
    comm.free();
}

TEST(Hdf5Errors, NotAnHdf5FileIsFormatError) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = mpistage_test::data_dir() + "/SOURCES.md";
    H5T_EXPECT_SAME_ERROR(mpistage::FormatError, Hdf5Source(comm, path), "SOURCES.md",
                          "not an HDF5 file");
    comm.free();
}

TEST(Hdf5Errors, MissingDatasetIsConfigErrorNamingIt) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    H5T_EXPECT_SAME_ERROR(
        mpistage::ConfigError,
        Hdf5Source(comm, kDir + "chunked.hdf5", fields_opt({"dataset1", "no_such_dataset"})),
        "no_such_dataset");
    comm.free();
}

TEST(Hdf5Errors, FirstDimensionsDifferIsConfigError) {
    MPISTAGE_REQUIRE_TEST_DATA();
    H2File f;
    ASSERT_TRUE(f.ok);
    Communicator comm(MPI_COMM_WORLD);
    // Named fields of 10 and 3 rows.
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError,
                          Hdf5Source(comm, f.path, fields_opt({"ten", "three"})), "ten[10]",
                          "three[3]");
    // Discovery finds both and refuses to guess.
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError, Hdf5Source(comm, f.path), "ten[10]", "three[3]");
    comm.free();
}

// BUGS H7: NULL and scalar dataspaces have nothing to shard.
TEST(Hdf5Errors, NullAndScalarDataspacesNothingToShard) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "test_scalar_empty_datasets_latest.hdf5";
    for (const std::string name :
         {"empty_int_32", "empty_float_64", "scalar_float_64", "scalar_uint_8"}) {
        H5T_EXPECT_SAME_ERROR(mpistage::ConfigError, Hdf5Source(comm, file, fields_opt({name})),
                              "nothing to shard", name);
    }
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError, Hdf5Source(comm, file), "nothing to shard");
    comm.free();
}

// BUGS H6: a missing filter plugin is an Hdf5Error naming the dataset and filter 32004.
TEST(Hdf5Errors, MissingLz4FilterNamesDatasetAndFilter) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "lz4_datasets.hdf5";
    H5T_EXPECT_SAME_ERROR(mpistage::Hdf5Error, Hdf5Source(comm, file, fields_opt({"float32_bs0"})),
                          "float32_bs0", "32004");
    H5T_EXPECT_SAME_ERROR(mpistage::Hdf5Error, Hdf5Source(comm, file), "32004");
    comm.free();
}

TEST(Hdf5Errors, ZeroMaxReadBytesIsConfigError) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options o = fields_opt({"dataset1"});
    o.max_read_bytes = 0;
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError, Hdf5Source(comm, kDir + "chunked.hdf5", o),
                          "max_read_bytes");
    comm.free();
}

// An out-of-range id in an independent read is a clear error, not a read at a wild offset.
TEST(Hdf5Errors, ReadOutOfRangeIdIsConfigError) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, kDir + "chunked.hdf5", fields_opt({"dataset1"}));
    const std::uint64_t id = 21;
    h5t::VectorSink sink(src.fields(), 1);
    const auto o = h5t::catch_error<mpistage::ConfigError>([&] { src.read(&id, 1, sink); });
    EXPECT_TRUE(o.right_type) << o.message;
    EXPECT_NE(o.message.find("out of range"), std::string::npos) << o.message;
    src.close();
    comm.free();
}
