// The loader's contents fingerprint: the same relative path naming different HDF5 files on
// different ranks is a ConfigError on every rank, not a silent mix of both files.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "h5t_checks.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

using namespace mpistage;

// The same relative path naming different files on different ranks (node-local copies that
// diverged): metadata agrees, the contents of samples 0, N/2, N-1 do not. Every rank must get
// the same ConfigError at Loader construction instead of staging a mix of both files.
TEST(LoaderContents, SamePathDifferentFileOnOneRankIsConfigError) {
    const h5t::TempDir tmp;
    const int r = h5t::rank();
    const std::string dir = tmp.file("rank" + std::to_string(r));
    std::filesystem::create_directories(dir);
    {
        hsize_t n = 64;
        std::vector<std::int32_t> x(64);
        for (int i = 0; i < 64; ++i) x[static_cast<std::size_t>(i)] = i * (r == 0 ? 1 : 2);
        hid_t file = H5Fcreate((dir + "/same.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hid_t sp = H5Screate_simple(1, &n, nullptr);
        hid_t d = H5Dcreate2(file, "x", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data());
        H5Dclose(d);
        H5Sclose(sp);
        H5Fclose(file);
    }
    const auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(dir);
    Communicator comm(MPI_COMM_WORLD);
    {
        Hdf5Source src(comm, "same.h5");
        LoaderOptions o;
        o.plan.batch_size = 4;
        const auto out = h5t::catch_error<ConfigError>([&] { Loader loader(comm, src, o); });
        if (h5t::size() > 1) {
            h5t::expect_same_error(out, "ConfigError", {"contents of samples 0, N/2, N-1"});
        } else {
            EXPECT_FALSE(out.threw) << out.message;  // one rank: nothing to differ from
        }
        src.close();
    }
    std::filesystem::current_path(cwd);
}
