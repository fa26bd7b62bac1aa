// The loader's bookkeeping is flat in N for fixed-size fields (DESIGN.md, bounded memory): over
// an HDF5 dataset of 10^8 rows that is chunked with no chunk written (reads give the fill
// value, the file is a few KB), the epoch's plan stores no slot (structural: the plan is
// computed per slot), and the peak resident memory of building the loader and taking batches
// grows by far less than a stored plan would need (9 bytes per row of the rank's shard:
// >= 225 MB at W = 4).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "peak_rss.hpp"

using namespace mpistage;

namespace {

constexpr hsize_t kRows = 100000000;           // 10^8 rows of one uint8
constexpr std::uint64_t kBound = 48ull << 20;  // ring + allocator + MPI + HDF5 chunk cache

using mpistage::testing::reset_peak;
using mpistage::testing::status_bytes;

/// Rank 0 (serial HDF5): dataset "x" of kRows uint8, chunks of 2^20 rows, none written.
bool write_virtual(const std::string& path) {
    const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) return false;
    const hsize_t dims[1] = {kRows};
    const hsize_t chunk[1] = {hsize_t{1} << 20};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    const hid_t ds = H5Dcreate2(file, "x", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const bool ok = ds >= 0;
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
    return H5Fclose(file) >= 0 && ok;
}

}  // namespace

TEST(LoaderMemoryFlat, FixedSizeRowsNeedNoPerRowBookkeeping) {
    h5t::TempDir dir;
    const std::string path = dir.file("virtual.h5");
    const bool written = h5t::rank() != 0 || write_virtual(path);
    ASSERT_TRUE(h5t::all_true(written));
    const bool peaks = h5t::all_true(reset_peak() && status_bytes("VmHWM") > 0);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, path);
    ASSERT_EQ(src.num_samples(), kRows);
    for (const auto& [sharding, shuffle] : {std::pair{Sharding::byte_range, Shuffle::local},
                                            std::pair{Sharding::global, Shuffle::global}}) {
        const std::string what = to_string(sharding) + "/" + to_string(shuffle);
        LoaderOptions o;
        o.plan.batch_size = 256;
        o.plan.sharding = sharding;
        o.plan.shuffle = shuffle;
        o.plan.remainder = Remainder::mask;
        o.pipeline.prefetch = 2;
        o.pipeline.io_threads = 1;
        o.delivery.pin_memory = false;
        reset_peak();
        const std::uint64_t before = status_bytes("VmRSS");
        {
            Loader loader(comm, src, o);
            auto range = loader.epoch(0);
            EXPECT_TRUE(range.plan().on_demand()) << what;
            EXPECT_TRUE(range.plan().ids.empty()) << what;
            EXPECT_TRUE(range.plan().valid.empty()) << what;
            EXPECT_EQ(range.steps(), (kRows + 256 * h5t::size() - 1) / (256 * h5t::size()));
            HostBatch b;
            for (int k = 0; k < 4 && range.next(b); ++k) {
                ASSERT_EQ(b.size(), 256u);
                for (std::size_t j = 0; j < b.size(); ++j) {
                    EXPECT_GE(b.index()[j], 0);
                    EXPECT_LT(b.index()[j], static_cast<std::int64_t>(kRows));
                }
            }
        }
        const std::uint64_t peak = status_bytes("VmHWM");
        const std::uint64_t growth = peak > before ? peak - before : 0;
        if (peaks) {
            EXPECT_LT(growth, kBound) << what << ": peak RSS grew by " << growth << " bytes";
        }
    }
    comm.free();
}
