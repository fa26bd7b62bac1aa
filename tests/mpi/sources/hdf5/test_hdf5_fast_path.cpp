// Regression tests for the pread fast path of Hdf5Source (found by the adversarial review):
// it must never read bytes that are not exactly the native type in this very file.
//  - an external link: H5Dget_offset is an offset in the *target* file;
//  - an integer with 16-bit precision at bit offset 8, and a float with a non-IEEE exponent
//    bias: same size as the native type, different bits;
//  - a contiguous dataset never written (its storage not allocated) in a file with a user
//    block: H5Dget_offset returned HADDR_UNDEF plus the user block's size (511), not
//    HADDR_UNDEF, and the fast path served the superblock's bytes instead of the fill value;
//  - the same never written with fill time never: H5Dread leaves the buffer as it was, and the
//    memory tier served its earlier (heap) bytes; now zeros;
//  - a chunked dataset written in part: the memory tier's collective H5Dread failed (HDF5
//    1.10.8: MPI_File_set_view, MPI_ERR_TYPE); now staged with independent reads.
// Known answers come from h5dump.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

using namespace mpistage;

namespace {

class RowSink final : public BatchSink {
public:
    explicit RowSink(std::size_t bytes) : data_(bytes) {}
    std::byte* fixed(std::size_t, std::size_t slot) override { return data_.data() + slot * 4; }
    std::byte* ragged(std::size_t, std::size_t, std::uint64_t) override { return nullptr; }
    template <class T>
    T at(std::size_t i) const {
        T v{};
        std::memcpy(&v, data_.data() + i * sizeof(T), sizeof(T));
        return v;
    }

private:
    std::vector<std::byte> data_;
};

/// Rows of `row_bytes` into a buffer the caller owns (one field).
class RowsSink final : public BatchSink {
public:
    RowsSink(std::vector<std::byte>& out, std::size_t row_bytes) : out_(out), row_(row_bytes) {}
    std::byte* fixed(std::size_t, std::size_t slot) override { return out_.data() + slot * row_; }
    std::byte* ragged(std::size_t, std::size_t, std::uint64_t) override { return nullptr; }

private:
    std::vector<std::byte>& out_;
    std::size_t row_;
};

struct OddFiles {
    std::string dir;
    std::string target;
    std::string link;
    std::string odd;
    std::string userblock;
    std::string partly;  // "never" (fill time never, never written), "chunks" (rows 0-1 of 8)
};

// Rank 0 writes the files with the HDF5 C API (serial driver); everyone gets the paths.
const OddFiles& odd_files() {
    static OddFiles f = [] {
        OddFiles out;
        long id = static_cast<long>(getpid());
        MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        out.dir = "/tmp/mpistage-fastpath-" + std::to_string(id);
        out.target = out.dir + "/target.h5";
        out.link = out.dir + "/link.h5";
        out.odd = out.dir + "/odd_types.h5";
        out.userblock = out.dir + "/userblock.h5";
        out.partly = out.dir + "/partly.h5";
        int ok = 1;
        if (h5t::rank() == 0) {
            static std::string cleanup;
            cleanup = out.dir;
            std::atexit([] { std::filesystem::remove_all(cleanup); });
            std::filesystem::create_directories(out.dir);
            std::vector<std::int32_t> x(100);
            for (int i = 0; i < 100; ++i) x[static_cast<std::size_t>(i)] = i;
            hsize_t n = 100;
            hid_t t = H5Fcreate(out.target.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
            hid_t sp = H5Screate_simple(1, &n, nullptr);
            hid_t d = H5Dcreate2(t, "x", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            ok = ok && H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()) >= 0;
            H5Dclose(d);
            H5Sclose(sp);
            H5Fclose(t);

            hid_t l = H5Fcreate(out.link.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
            hsize_t padn = 100000;
            std::vector<std::uint8_t> pad(padn, 0x41);
            sp = H5Screate_simple(1, &padn, nullptr);
            d = H5Dcreate2(l, "pad", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            ok =
                ok && H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, pad.data()) >= 0;
            H5Dclose(d);
            H5Sclose(sp);
            ok = ok &&
                 H5Lcreate_external("target.h5", "/x", l, "ext", H5P_DEFAULT, H5P_DEFAULT) >= 0;
            H5Fclose(l);

            hid_t o = H5Fcreate(out.odd.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
            hsize_t six = 6;
            sp = H5Screate_simple(1, &six, nullptr);
            hid_t p16 = H5Tcopy(H5T_STD_I32LE);
            H5Tset_precision(p16, 16);
            H5Tset_offset(p16, 8);
            const std::int32_t iv[6] = {1, 2, 3, -4, 100, -32768};
            d = H5Dcreate2(o, "p16", p16, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            ok = ok && H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, iv) >= 0;
            H5Dclose(d);
            H5Tclose(p16);
            hid_t bias = H5Tcopy(H5T_IEEE_F32LE);
            H5Tset_ebias(bias, 100);
            const float fv[6] = {1.0f, 2.0f, 3.5f, -4.0f, 100.0f, 0.5f};
            d = H5Dcreate2(o, "f_bias", bias, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            ok = ok && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, fv) >= 0;
            H5Dclose(d);
            H5Tclose(bias);
            H5Sclose(sp);
            H5Fclose(o);

            // A 512-byte user block; "unwritten" (fill value 7, storage allocated late, never
            // written) and "written" (0..9), both contiguous int32.
            hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
            ok = ok && H5Pset_userblock(fcpl, 512) >= 0;
            hid_t u = H5Fcreate(out.userblock.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
            H5Pclose(fcpl);
            hsize_t ten = 10;
            sp = H5Screate_simple(1, &ten, nullptr);
            hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
            const std::int32_t fill = 7;
            ok = ok && H5Pset_fill_value(dcpl, H5T_NATIVE_INT32, &fill) >= 0;
            ok = ok && H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE) >= 0;
            d = H5Dcreate2(u, "unwritten", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            ok = ok && d >= 0;
            H5Dclose(d);
            H5Pclose(dcpl);
            const std::int32_t wv[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
            d = H5Dcreate2(u, "written", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            ok = ok && H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, wv) >= 0;
            H5Dclose(d);
            H5Sclose(sp);
            H5Fclose(u);

            hid_t pf = H5Fcreate(out.partly.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
            hsize_t eight[2] = {8, 3};
            sp = H5Screate_simple(2, eight, nullptr);
            dcpl = H5Pcreate(H5P_DATASET_CREATE);
            ok = ok && H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0;
            d = H5Dcreate2(pf, "never", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            ok = ok && d >= 0;
            H5Dclose(d);
            H5Pclose(dcpl);
            dcpl = H5Pcreate(H5P_DATASET_CREATE);
            hsize_t chunk[2] = {2, 3};
            ok = ok && H5Pset_chunk(dcpl, 2, chunk) >= 0;
            d = H5Dcreate2(pf, "chunks", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            hsize_t start[2] = {0, 0};
            hid_t fsel = H5Dget_space(d);
            ok = ok &&
                 H5Sselect_hyperslab(fsel, H5S_SELECT_SET, start, nullptr, chunk, nullptr) >= 0;
            hid_t msel = H5Screate_simple(2, chunk, nullptr);
            const std::int32_t rows01[6] = {1, 2, 3, 4, 5, 6};
            ok = ok && H5Dwrite(d, H5T_NATIVE_INT32, msel, fsel, H5P_DEFAULT, rows01) >= 0;
            H5Sclose(msel);
            H5Sclose(fsel);
            H5Dclose(d);
            H5Pclose(dcpl);
            H5Sclose(sp);
            H5Fclose(pf);
        }
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!ok) throw std::runtime_error("could not write the fast-path test files");
        return out;
    }();
    return f;
}

template <class T>
void expect_rows_match_h5dump(const std::string& file, const std::string& dataset,
                              std::size_t rows) {
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options o;
    o.fields = {dataset};
    Hdf5Source src(comm, file, o);
    EXPECT_EQ(src.num_samples(), rows);
    const auto want = h5t::parse_as<T>(h5t::h5dump_values(file, dataset));
    ASSERT_EQ(want.size(), rows);  // same on every rank (broadcast)
    std::vector<std::uint64_t> ids(rows);
    for (std::size_t i = 0; i < rows; ++i) ids[i] = i;
    RowSink sink(rows * sizeof(T));
    src.read(ids.data(), ids.size(), sink);
    for (std::size_t i = 0; i < rows; ++i) {
        EXPECT_EQ(sink.at<T>(i), want[i]) << dataset << " row " << i << " of " << file;
    }
}

}  // namespace

TEST(Hdf5FastPath, ExternalLinkReadsTheTargetFile) {
    const OddFiles& f = odd_files();
    expect_rows_match_h5dump<std::int32_t>(f.link, "ext", 100);
}

TEST(Hdf5FastPath, IntegerWithOddPrecisionAndOffsetIsConverted) {
    expect_rows_match_h5dump<std::int32_t>(odd_files().odd, "p16", 6);
}

TEST(Hdf5FastPath, FloatWithOddExponentBiasIsConverted) {
    expect_rows_match_h5dump<float>(odd_files().odd, "f_bias", 6);
}

TEST(Hdf5FastPath, DuplicateFieldIsConfigError) {
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options o;
    o.fields = {"x", "x"};
    EXPECT_THROW(Hdf5Source(comm, odd_files().target, o), ConfigError);
}

// The fill value of a dataset whose storage was never allocated, not the bytes at
// H5Dget_offset's answer; a written dataset in the same file (after the user block) still
// takes the fast path and reads its rows.
TEST(Hdf5FastPath, UnallocatedDatasetAfterUserBlockReadsTheFillValue) {
    const OddFiles& f = odd_files();
    expect_rows_match_h5dump<std::int32_t>(f.userblock, "unwritten", 10);
    const auto want = h5t::parse_as<std::int32_t>(h5t::h5dump_values(f.userblock, "unwritten"));
    EXPECT_EQ(want, std::vector<std::int32_t>(10, 7));  // h5dump: the fill value
    expect_rows_match_h5dump<std::int32_t>(f.userblock, "written", 10);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options o;
    o.fields = {"written"};
    EXPECT_FALSE(Hdf5Source(comm, f.userblock, o).reads_use_mpi());  // the fast path
    o.fields = {"unwritten"};
    EXPECT_TRUE(Hdf5Source(comm, f.userblock, o).reads_use_mpi());  // H5Dread
}

// Fill time never on a dataset never written: HDF5 leaves the rows undefined (H5Dread does not
// write them); they read as zeros, never as the bytes the destination held before.
TEST(Hdf5FastPath, NeverWrittenWithFillTimeNeverReadsAsZeros) {
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options o;
    o.fields = {"never"};
    Hdf5Source src(comm, odd_files().partly, o);
    ASSERT_EQ(src.num_samples(), 8u);
    const std::vector<std::uint64_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<std::byte> out(8 * 12, std::byte{0xab});  // what a slot held before
    RowsSink sink(out, 12);
    src.read(ids.data(), ids.size(), sink);
    EXPECT_EQ(out, std::vector<std::byte>(8 * 12, std::byte{0}));
}

// A chunked dataset written in part (rows 0-1 of 8): not read collectively, and staged in
// memory it serves h5dump's values (the written rows, the fill value 0 elsewhere).
TEST(Hdf5FastPath, PartlyWrittenChunkedDatasetIsStagedInMemory) {
    const std::string file = odd_files().partly;
    const auto want = h5t::parse_as<std::int32_t>(h5t::h5dump_values(file, "chunks"));
    ASSERT_EQ(want.size(), 24u);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options ho;
    ho.fields = {"chunks"};
    Hdf5Source src(comm, file, ho);
    EXPECT_EQ(src.collective_rows(), nullptr);
    LoaderOptions o;
    o.plan.batch_size = 1;
    o.plan.remainder = Remainder::mask;
    o.tier.stage = Stage::memory;
    o.delivery.pin_memory = false;
    o.delivery.device = "cpu";
    Loader loader(comm, src, o);
    EXPECT_EQ(loader.stats().tier, "memory");
    std::uint64_t rows = 0;
    for (const HostBatch& b : loader.epoch(0)) {
        if (b.num_valid() == 0) continue;
        const std::int64_t id = b.index()[0];
        const std::int32_t* v = b.fields()[0].as<std::int32_t>();
        for (std::size_t e = 0; e < 3; ++e) {
            EXPECT_EQ(v[e], want[static_cast<std::size_t>(id) * 3 + e]) << "row " << id;
        }
        ++rows;
    }
    std::uint64_t total = rows;
    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total, 8u);
}
