#pragma once
// Shared by the Hdf5Source MPI tests (test_hdf5_*.cpp): the public test files of
// ../shared/data/hdf5 (SOURCES.md), field options, and a small two-dataset file written by rank 0.

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "test_data.hpp"
#include "h5t_files.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/hdf5_source.hpp"

namespace h5src {

inline const std::string kDir = mpistage_test::data_dir() + "/hdf5/";

inline mpistage::Hdf5Options fields_opt(std::vector<std::string> names,
                                        std::uint64_t max_read_bytes = 0) {
    mpistage::Hdf5Options o;
    o.fields = std::move(names);
    if (max_read_bytes) o.max_read_bytes = max_read_bytes;
    return o;
}

// Rank 0 writes `ten` int32 [10,3] = 1000*i + j and `three` float64 [3,4] = i + j/8.
struct H2File {
    h5t::TempDir dir;
    std::string path = dir.file("h2.h5");
    bool ok = false;
    H2File() {
        int good = 1;
        if (h5t::rank() == 0) {
            std::vector<std::int32_t> ten(30);
            for (int i = 0; i < 10; ++i)
                for (int j = 0; j < 3; ++j) ten[i * 3 + j] = 1000 * i + j;
            std::vector<double> three(12);
            for (int i = 0; i < 3; ++i)
                for (int j = 0; j < 4; ++j) three[i * 4 + j] = i + j / 8.0;
            good = h5t::write_hdf5(
                path,
                {{"ten", H5T_STD_I32BE, H5T_NATIVE_INT32, {10, 3}, ten.data(), {}, 0},
                 {"three", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {3, 4}, three.data(), {2, 4}, 1}});
        }
        MPI_Bcast(&good, 1, MPI_INT, 0, MPI_COMM_WORLD);
        ok = good == 1;
    }
};

}  // namespace h5src
