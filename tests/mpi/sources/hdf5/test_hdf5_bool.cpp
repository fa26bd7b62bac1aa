// h5py's booleans as bool fields: an enum over a signed byte with exactly FALSE = 0 and
// TRUE = 1 (what h5py writes for numpy.bool_). Rank 0 writes the files with the HDF5 C API in
// that convention, in little- and big-endian byte order, contiguous and chunked with gzip;
// the known answers come from h5dump (TRUE / FALSE tokens). Also: the enums that are not
// booleans (a third member, an unsigned base) are refused by name, and left out of the default
// field list with a note.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "h5t_checks.hpp"
#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "sources/file_rows.hpp"

using mpistage::Communicator;
using mpistage::DType;
using mpistage::Hdf5Options;
using mpistage::Hdf5Source;

namespace {

constexpr hsize_t kRows = 37;

bool written_value(hsize_t row, hsize_t column) {
    return column == 0 ? row % 3 == 0 : row % 5 == 1;
}

/// An enum type over `base` with the given members (name, value).
hid_t enum_type(hid_t base, const std::vector<std::pair<const char*, int>>& members) {
    const hid_t t = H5Tenum_create(base);
    for (const auto& [name, value] : members) {
        if (H5Tget_sign(base) == H5T_SGN_2) {
            const auto v = static_cast<std::int8_t>(value);
            H5Tenum_insert(t, name, &v);
        } else {
            const auto v = static_cast<std::uint8_t>(value);
            H5Tenum_insert(t, name, &v);
        }
    }
    return t;
}

/// Writes dataset `name` of [kRows, 2] bytes of type `file_type` (from signed bytes 0/1 in
/// memory, converted by HDF5), chunked with gzip when `chunked`.
void write_bools(hid_t file, const char* name, hid_t file_type, bool chunked) {
    std::vector<std::int8_t> data(kRows * 2);
    for (hsize_t r = 0; r < kRows; ++r) {
        for (hsize_t c = 0; c < 2; ++c) data[r * 2 + c] = written_value(r, c) ? 1 : 0;
    }
    const hsize_t dims[2] = {kRows, 2};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunked) {
        const hsize_t chunk[2] = {8, 2};
        H5Pset_chunk(dcpl, 2, chunk);
        H5Pset_deflate(dcpl, 4);
    }
    const hid_t d = H5Dcreate2(file, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const hid_t mem = enum_type(H5T_NATIVE_INT8, {{"FALSE", 0}, {"TRUE", 1}});
    H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
    H5Tclose(mem);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
}

/// Rank 0 writes `bools.h5` (booleans and an int64 `id` of kRows rows) and `other_enums.h5`.
struct Files {
    h5t::TempDir dir;
    std::string bools;
    std::string others;
    Files() {
        dir.detach_from_mpi();  // a static: removed at exit, after MPI_Finalize
        bools = dir.path() + "/bools.h5";
        others = dir.path() + "/other_enums.h5";
        if (h5t::rank() == 0) {
            const hid_t f = H5Fcreate(bools.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
            const hid_t le = enum_type(H5T_STD_I8LE, {{"FALSE", 0}, {"TRUE", 1}});
            const hid_t be = enum_type(H5T_STD_I8BE, {{"FALSE", 0}, {"TRUE", 1}});
            write_bools(f, "le", le, false);
            write_bools(f, "be", be, false);
            write_bools(f, "chunked", le, true);
            std::vector<std::int64_t> ids(kRows);
            for (hsize_t r = 0; r < kRows; ++r) ids[r] = static_cast<std::int64_t>(r);
            const hsize_t n = kRows;
            const hid_t space = H5Screate_simple(1, &n, nullptr);
            const hid_t d =
                H5Dcreate2(f, "id", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids.data());
            H5Dclose(d);
            H5Sclose(space);
            H5Tclose(le);
            H5Tclose(be);
            H5Fclose(f);

            const hid_t g = H5Fcreate(others.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
            const hid_t three = enum_type(H5T_STD_I8LE, {{"FALSE", 0}, {"TRUE", 1}, {"MAYBE", 2}});
            const hid_t unsigned_base = enum_type(H5T_STD_U8LE, {{"FALSE", 0}, {"TRUE", 1}});
            const hid_t ok = enum_type(H5T_STD_I8LE, {{"FALSE", 0}, {"TRUE", 1}});
            write_bools(g, "three_members", three, false);
            write_bools(g, "unsigned_base", unsigned_base, false);
            write_bools(g, "flag", ok, false);
            H5Tclose(three);
            H5Tclose(unsigned_base);
            H5Tclose(ok);
            H5Fclose(g);
        }
        h5t::barrier();
    }
};

const Files& files() {
    static Files f;
    return f;
}

Hdf5Options fields_of(std::vector<std::string> names) {
    Hdf5Options o;
    o.fields = std::move(names);
    return o;
}

}  // namespace

TEST(Hdf5Bool, H5pyBooleansAreBoolFieldsWithTheValuesH5dumpReads) {
    const Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::string> names = {"le", "be", "chunked"};
    Hdf5Source src(comm, files().bools, fields_of(names));
    ASSERT_EQ(src.fields().size(), 3u);
    for (const auto& f : src.fields()) {
        EXPECT_EQ(f.dtype, DType::boolean) << f.name;
        EXPECT_EQ(f.sample_shape, (std::vector<std::int64_t>{2})) << f.name;
        EXPECT_EQ(f.sample_bytes, 2u) << f.name;
    }
    // The contiguous ones, in either byte order, are read as raw bytes (the pread fast path and
    // the mapped tier); the chunked one through H5Dread.
    mpistage::detail::FileRows rows;
    EXPECT_TRUE(src.file_rows(0, rows));
    EXPECT_TRUE(src.file_rows(1, rows));
    EXPECT_FALSE(src.file_rows(2, rows));
    // Every row, reversed (no coalescing), against h5dump's TRUE / FALSE.
    std::vector<std::uint64_t> ids(kRows);
    for (std::uint64_t i = 0; i < kRows; ++i) ids[i] = kRows - 1 - i;
    h5t::VectorSink sink(src.fields(), ids.size());
    src.read(ids.data(), ids.size(), sink);
    for (std::size_t field = 0; field < names.size(); ++field) {
        const auto dump = h5t::h5dump_values(files().bools, names[field]);
        ASSERT_EQ(dump.size(), kRows * 2) << names[field];
        for (std::size_t k = 0; k < ids.size(); ++k) {
            for (std::size_t c = 0; c < 2; ++c) {
                const std::string& word = dump[ids[k] * 2 + c];
                ASSERT_TRUE(word == "TRUE" || word == "FALSE") << word;
                EXPECT_EQ(sink.value<std::uint8_t>(field, k, c), word == "TRUE" ? 1u : 0u)
                    << names[field] << " row " << ids[k] << " column " << c;
                EXPECT_EQ(word == "TRUE", written_value(ids[k], c));
            }
        }
    }
    // With no field named, the booleans are among the fields, and nothing is left out.
    src.close();
    Hdf5Source all(comm, files().bools);
    EXPECT_EQ(all.fields().size(), 4u);
    EXPECT_TRUE(all.notes().empty());
    all.close();
}

TEST(Hdf5Bool, OtherEnumsAreRefusedByNameAndLeftOutWithANote) {
    const Communicator comm(MPI_COMM_WORLD);
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError,
                          Hdf5Source(comm, files().others, fields_of({"three_members"})),
                          "three_members", "unsupported type (enum, 1 bytes)");
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError,
                          Hdf5Source(comm, files().others, fields_of({"unsigned_base"})),
                          "unsigned_base", "unsupported type (enum, 1 bytes)");
    Hdf5Source src(comm, files().others);
    ASSERT_EQ(src.fields().size(), 1u);
    EXPECT_EQ(src.fields()[0].name, "flag");
    const auto notes = src.notes();
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("2 dataset(s) left out"), std::string::npos) << notes[0];
    EXPECT_NE(notes[0].find("'three_members' (enum, 1 bytes: not a field type)"), std::string::npos)
        << notes[0];
    EXPECT_NE(notes[0].find("'unsigned_base' (enum"), std::string::npos) << notes[0];
    src.close();
}
