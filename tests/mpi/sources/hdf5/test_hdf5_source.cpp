// Hdf5Source against the public test files of ../shared/data/hdf5 (SOURCES.md), with known
// answers from h5dump (run on rank 0, broadcast) and SOURCES.md: every datatype in both byte
// orders, discovery, chunked, gzip+shuffle, compact and resizable datasets.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "h5t_checks.hpp"
#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
#include "hdf5_test_files.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "sources/collective_rows.hpp"
#include "test_data.hpp"

using h5src::fields_opt;
using h5src::kDir;
using mpistage::Communicator;
using mpistage::DType;
using mpistage::Hdf5Source;

namespace {

// Compares every row of one field read through mpistage with h5dump's text, typed.
template <class T>
void expect_field_equals(const h5t::VectorSink& sink, std::size_t field,
                         const std::vector<std::size_t>& positions,
                         const std::vector<std::uint64_t>& ids, std::size_t row_elements,
                         const std::vector<std::string>& dump, const std::string& what) {
    const auto expected = h5t::parse_as<T>(dump);
    for (std::size_t k = 0; k < ids.size(); ++k) {
        for (std::size_t e = 0; e < row_elements; ++e) {
            const std::size_t at = ids[k] * row_elements + e;
            ASSERT_LT(at, expected.size()) << what;  // local check, no collective follows
            const T got = sink.value<T>(field, positions.empty() ? k : positions[k], e);
            EXPECT_EQ(got, expected[at]) << what << " row " << ids[k] << " element " << e;
        }
    }
}

template <class T>
void check_datatype_dataset(const Communicator& comm, const std::string& name, DType want) {
    const std::string file = kDir + "dataset_datatypes.hdf5";
    const auto dump = h5t::h5dump_values(file, name);
    EXPECT_EQ(dump.size(), 4u) << name;
    Hdf5Source src(comm, file, fields_opt({name}));
    ASSERT_EQ(src.fields().size(), 1u);
    EXPECT_EQ(src.fields()[0].dtype, want) << name;
    EXPECT_TRUE(src.fields()[0].sample_shape.empty()) << name;
    EXPECT_EQ(src.fields()[0].sample_bytes, sizeof(T)) << name;
    EXPECT_EQ(src.num_samples(), 4u) << name;
    // Reversed ids into reversed slots: no coalescing, every row on its own.
    const std::vector<std::uint64_t> ids = {3, 2, 1, 0};
    h5t::VectorSink sink(src.fields(), 4);
    src.read(ids.data(), ids.size(), sink);
    if (dump.size() == 4u) expect_field_equals<T>(sink, 0, {}, ids, 1, dump, name);
    // And one coalesced run of all four rows.
    const std::vector<std::uint64_t> all = {0, 1, 2, 3};
    h5t::VectorSink sink2(src.fields(), 4);
    src.read(all.data(), all.size(), sink2);
    if (dump.size() == 4u) expect_field_equals<T>(sink2, 0, {}, all, 1, dump, name);
}

}  // namespace

// Every integer and float type in both byte orders comes back native, equal to h5dump's values.
TEST(Hdf5Source, DatatypesBothByteOrdersMatchH5dump) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    for (const std::string order : {"big", "little"}) {
        check_datatype_dataset<std::int8_t>(comm, "int08_" + order, DType::int8);
        check_datatype_dataset<std::uint8_t>(comm, "uint08_" + order, DType::uint8);
        check_datatype_dataset<std::int16_t>(comm, "int16_" + order, DType::int16);
        check_datatype_dataset<std::uint16_t>(comm, "uint16_" + order, DType::uint16);
        check_datatype_dataset<std::int32_t>(comm, "int32_" + order, DType::int32);
        check_datatype_dataset<std::uint32_t>(comm, "uint32_" + order, DType::uint32);
        check_datatype_dataset<std::int64_t>(comm, "int64_" + order, DType::int64);
        check_datatype_dataset<std::uint64_t>(comm, "uint64_" + order, DType::uint64);
        check_datatype_dataset<float>(comm, "float32_" + order, DType::float32);
        check_datatype_dataset<double>(comm, "float64_" + order, DType::float64);
    }
    comm.free();
}

// Discovery with no field names: all 20 datasets share dimension 0 (4), so all become fields.
TEST(Hdf5Source, DiscoversEveryDatasetOfDatatypesFile) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "dataset_datatypes.hdf5";
    Hdf5Source src(comm, file);
    EXPECT_EQ(src.fields().size(), 20u);
    EXPECT_EQ(src.num_samples(), 4u);
    std::uint64_t record = 0;
    for (const auto& f : src.fields()) record += f.sample_bytes;
    // 2 orders x (1+1+2+2+4+4+8+8+4+8) bytes.
    EXPECT_EQ(record, 2u * 42u);
    // The byte-range cuts of all ranks cover the 4 records exactly once.
    std::uint64_t in_cuts = 0;
    for (int r = 0; r < comm.size(); ++r) in_cuts += src.records_in_cut(r, comm.size());
    EXPECT_EQ(in_cuts, 4u);
    EXPECT_TRUE(h5t::same_on_all_ranks(h5t::fnv(src.fingerprint())));
    comm.free();
}

// chunked.hdf5: int32 (21,16) in 2x2 chunks; rows in any order (with repeats) equal h5dump.
TEST(Hdf5Source, ChunkedRowsMatchH5dump) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "chunked.hdf5";
    const auto dump = h5t::h5dump_values(file, "dataset1");
    EXPECT_EQ(dump.size(), 21u * 16u);
    Hdf5Source src(comm, file, fields_opt({"dataset1"}));
    ASSERT_EQ(src.num_samples(), 21u);
    ASSERT_EQ(src.fields()[0].sample_shape, (std::vector<std::int64_t>{16}));
    EXPECT_EQ(src.fields()[0].dtype, DType::int32);
    // A rank-dependent selection so ranks read different rows; scattered into shuffled slots.
    std::vector<std::uint64_t> ids = {20, 0, 1, 2, 3, 7, 7, 19, 10, 11, 12};
    for (auto& id : ids) id = (id + static_cast<std::uint64_t>(h5t::rank()) * 5) % 21;
    std::vector<std::size_t> pos(ids.size());
    std::iota(pos.rbegin(), pos.rend(), 0);
    h5t::VectorSink sink(src.fields(), ids.size(), pos);
    src.read(ids.data(), ids.size(), sink);
    if (dump.size() == 21u * 16u)
        expect_field_equals<std::int32_t>(sink, 0, pos, ids, 16, dump, "chunked");

    // Every row, contiguous, through the collective path with 3 rows per H5Dread (192 bytes).
    const std::uint64_t w = static_cast<std::uint64_t>(h5t::size());
    const std::uint64_t r = static_cast<std::uint64_t>(h5t::rank());
    const std::uint64_t begin = r * 21 / w, end = (r + 1) * 21 / w;
    Hdf5Source small(comm, file, fields_opt({"dataset1"}, 3 * 16 * 4));
    std::vector<std::int32_t> rows((end - begin) * 16, -7);
    const auto calls = small.collective_rows()->read_rows_collective(
        0, begin, end - begin, reinterpret_cast<std::byte*>(rows.data()));
    EXPECT_TRUE(h5t::same_on_all_ranks(calls));
    EXPECT_EQ(calls, (h5t::max(end - begin) + 2) / 3);
    const auto expected = h5t::parse_as<std::int32_t>(dump);
    for (std::uint64_t i = 0; i < (end - begin) * 16 && expected.size() == 21u * 16u; ++i) {
        EXPECT_EQ(rows[i], expected[begin * 16 + i]) << "collective element " << begin * 16 + i;
    }
    small.close();
    src.close();
    comm.free();
}

// gzip (+ shuffle) chunked datasets, several fields of different types at once.
TEST(Hdf5Source, GzipShuffleChunkedMatchH5dump) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "compressed.hdf5";
    const auto d1 = h5t::h5dump_values(file, "dataset1");
    const auto d2 = h5t::h5dump_values(file, "dataset2");
    const auto d3 = h5t::h5dump_values(file, "dataset3");
    EXPECT_EQ(d1.size(), 336u);
    EXPECT_EQ(d2.size(), 336u);
    EXPECT_EQ(d3.size(), 336u);
    Hdf5Source src(comm, file, fields_opt({"dataset1", "dataset2", "dataset3"}));
    ASSERT_EQ(src.fields().size(), 3u);
    EXPECT_EQ(src.fields()[0].dtype, DType::uint16);
    EXPECT_EQ(src.fields()[1].dtype, DType::int32);
    EXPECT_EQ(src.fields()[2].dtype, DType::float64);
    EXPECT_TRUE(src.reads_use_mpi());
    std::vector<std::uint64_t> ids(21);
    std::iota(ids.begin(), ids.end(), 0);
    std::rotate(ids.begin(), ids.begin() + h5t::rank() % 21, ids.end());
    h5t::VectorSink sink(src.fields(), ids.size());
    src.read(ids.data(), ids.size(), sink);
    if (d1.size() == 336u) expect_field_equals<std::uint16_t>(sink, 0, {}, ids, 16, d1, "dataset1");
    if (d2.size() == 336u) expect_field_equals<std::int32_t>(sink, 1, {}, ids, 16, d2, "dataset2");
    if (d3.size() == 336u) expect_field_equals<double>(sink, 2, {}, ids, 16, d3, "dataset3");
    src.close();

    // The pyfive/jhdf "latest" file: a gzip float32 dataset in a group, (7,5) with 2x1 chunks.
    const std::string file2 = kDir + "test_compressed_chunked_datasets_latest.hdf5";
    const auto f32 = h5t::h5dump_values(file2, "float/float32");
    const auto f64 = h5t::h5dump_values(file2, "float/float64");
    EXPECT_EQ(f32.size(), 35u);
    EXPECT_EQ(f64.size(), 35u);
    Hdf5Source src2(comm, file2, fields_opt({"float/float32", "float/float64"}));
    EXPECT_EQ(src2.num_samples(), 7u);
    const std::vector<std::uint64_t> ids2 = {6, 5, 0, 1, 2, 3, 4};
    h5t::VectorSink sink2(src2.fields(), ids2.size());
    src2.read(ids2.data(), ids2.size(), sink2);
    if (f32.size() == 35u) expect_field_equals<float>(sink2, 0, {}, ids2, 5, f32, "float32");
    if (f64.size() == 35u) expect_field_equals<double>(sink2, 1, {}, ids2, 5, f64, "float64");
    src2.close();
    comm.free();
}

// Compact layout (data inside the object header), unlimited maximum dimensions, and a
// big-endian chunked dataset, all through H5Dread; discovery skips float16 and strings.
TEST(Hdf5Source, CompactResizableAndDiscoveryMatchH5dump) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string compact = kDir + "test_compact_datasets_latest.hdf5";
    const auto i8 = h5t::h5dump_values(compact, "int/int8");
    const auto i32 = h5t::h5dump_values(compact, "int/int32");
    const auto f64 = h5t::h5dump_values(compact, "float/float64");
    EXPECT_EQ(i8.size(), 10u);
    EXPECT_EQ(f64.size(), 10u);
    {
        Hdf5Source src(comm, compact, fields_opt({"int/int8", "int/int32", "float/float64"}));
        EXPECT_EQ(src.num_samples(), 10u);
        std::vector<std::uint64_t> ids = {9, 8, 0, 1, 2, 3, 4, 5, 6, 7};
        h5t::VectorSink sink(src.fields(), ids.size());
        src.read(ids.data(), ids.size(), sink);
        if (i8.size() == 10u)
            expect_field_equals<std::int8_t>(sink, 0, {}, ids, 1, i8, "compact int8");
        if (i32.size() == 10u)
            expect_field_equals<std::int32_t>(sink, 1, {}, ids, 1, i32, "compact int32");
        if (f64.size() == 10u)
            expect_field_equals<double>(sink, 2, {}, ids, 1, f64, "compact float64");
        src.close();
    }
    {
        // Discovery: 5 numeric datasets of 10 rows (int8/16/32, float32/64); float16 and the
        // string datasets are not fields.
        Hdf5Source src(comm, compact);
        std::set<std::string> names;
        for (const auto& f : src.fields()) names.insert(f.name);
        EXPECT_EQ(names, (std::set<std::string>{"float/float32", "float/float64", "int/int16",
                                                "int/int32", "int/int8"}));
        // ... and the report says which datasets were left out, and why.
        const auto notes = src.notes();
        ASSERT_EQ(notes.size(), 1u);
        EXPECT_NE(notes[0].find("'float/float16' (float, 2 bytes: not a field type)"),
                  std::string::npos)
            << notes[0];
        EXPECT_NE(notes[0].find("'string/variable_length_ascii' (string"), std::string::npos)
            << notes[0];
        src.close();
    }
    {
        // Fields named: nothing was decided for the user, no note.
        Hdf5Source src(comm, compact, fields_opt({"int/int8"}));
        EXPECT_TRUE(src.notes().empty());
        src.close();
    }
    // Naming an unsupported type explicitly is a ConfigError naming it.
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError,
                          Hdf5Source(comm, compact, fields_opt({"float/float16"})), "float/float16",
                          "unsupported type");
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError,
                          Hdf5Source(comm, compact, fields_opt({"string/variable_length_ascii"})),
                          "unsupported type");

    const std::string resizable = kDir + "resizable.hdf5";
    const auto d3 = h5t::h5dump_values(resizable, "dataset3");
    EXPECT_EQ(d3.size(), 32u);
    Hdf5Source rs(comm, resizable, fields_opt({"dataset3"}));
    EXPECT_EQ(rs.num_samples(), 8u);
    EXPECT_EQ(rs.fields()[0].dtype, DType::int16);
    std::vector<std::uint64_t> ids = {7, 6, 5, 4, 3, 2, 1, 0};
    h5t::VectorSink sink(rs.fields(), ids.size());
    rs.read(ids.data(), ids.size(), sink);
    if (d3.size() == 32u)
        expect_field_equals<std::int16_t>(sink, 0, {}, ids, 4, d3, "resizable dataset3");
    rs.close();

    // Current dims 10, maximum dims 1e11: only the 10 current rows exist.
    const std::string big = kDir + "100B_max_dimension_size.hdf5";
    const auto vals = h5t::h5dump_values(big, "100B-MaxSize");
    EXPECT_EQ(vals.size(), 10u);
    Hdf5Source bs(comm, big);
    EXPECT_EQ(bs.num_samples(), 10u);
    std::vector<std::uint64_t> all(10);
    std::iota(all.begin(), all.end(), 0);
    h5t::VectorSink bsink(bs.fields(), all.size());
    bs.read(all.data(), all.size(), bsink);
    if (vals.size() == 10u) expect_field_equals<double>(bsink, 0, {}, all, 1, vals, "100B-MaxSize");
    bs.close();
    comm.free();
}
