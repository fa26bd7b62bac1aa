// Hdf5Source against the public test files of ../shared/data/hdf5 (SOURCES.md), with known
// answers from h5dump (run on rank 0, broadcast) and SOURCES.md; collective split reads across
// the 2^31 element boundary (BUGS H3); uneven and empty collective partitions (BUGS H2).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "hdf5_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "sources/hdf5/hdf5_collective.hpp"

using mpistage::Communicator;
using mpistage::DType;
using mpistage::Hdf5Options;
using mpistage::Hdf5Source;

namespace {

const std::string kDir = std::string(MPISTAGE_TEST_DATA_DIR) + "/hdf5/";

Hdf5Options fields_opt(std::vector<std::string> names, std::uint64_t max_read_bytes = 0) {
    Hdf5Options o;
    o.fields = std::move(names);
    if (max_read_bytes) o.max_read_bytes = max_read_bytes;
    return o;
}

// Compares every row of one field read through mpistage with h5dump's text, typed.
template <class T>
void expect_field_equals(const h5t::VectorSink& sink, std::size_t field,
                         const std::vector<std::size_t>& positions, const std::vector<std::uint64_t>& ids,
                         std::size_t row_elements, const std::vector<std::string>& dump,
                         const std::string& what) {
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
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "dataset_datatypes.hdf5";
    Hdf5Source src(comm, file);
    EXPECT_EQ(src.fields().size(), 20u);
    EXPECT_EQ(src.num_samples(), 4u);
    std::uint64_t record = 0;
    for (const auto& f : src.fields()) record += f.sample_bytes;
    // 2 orders x (1+1+2+2+4+4+8+8+4+8) bytes.
    EXPECT_EQ(record, 2u * 42u);
    EXPECT_EQ(src.total_bytes(), 4u * record);
    EXPECT_TRUE(h5t::same_on_all_ranks(h5t::fnv(src.fingerprint())));
    comm.free();
}

// chunked.hdf5: int32 (21,16) in 2x2 chunks; rows in any order (with repeats) equal h5dump.
TEST(Hdf5Source, ChunkedRowsMatchH5dump) {
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
    if (dump.size() == 21u * 16u) expect_field_equals<std::int32_t>(sink, 0, pos, ids, 16, dump, "chunked");

    // Every row, contiguous, through the collective path with 3 rows per H5Dread (192 bytes).
    const std::uint64_t w = static_cast<std::uint64_t>(h5t::size());
    const std::uint64_t r = static_cast<std::uint64_t>(h5t::rank());
    const std::uint64_t begin = r * 21 / w, end = (r + 1) * 21 / w;
    Hdf5Source small(comm, file, fields_opt({"dataset1"}, 3 * 16 * 4));
    std::vector<std::int32_t> rows((end - begin) * 16, -7);
    const auto calls = mpistage::detail::Hdf5Access::read_rows_collective(small, 0, begin, end - begin,
                                                  reinterpret_cast<std::byte*>(rows.data()));
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
        if (i8.size() == 10u) expect_field_equals<std::int8_t>(sink, 0, {}, ids, 1, i8, "compact int8");
        if (i32.size() == 10u) expect_field_equals<std::int32_t>(sink, 1, {}, ids, 1, i32, "compact int32");
        if (f64.size() == 10u) expect_field_equals<double>(sink, 2, {}, ids, 1, f64, "compact float64");
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
        src.close();
    }
    // Naming an unsupported type explicitly is a ConfigError naming it.
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError, Hdf5Source(comm, compact, fields_opt({"float/float16"})),
                          "float/float16", "unsupported type");
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
    if (d3.size() == 32u) expect_field_equals<std::int16_t>(sink, 0, {}, ids, 4, d3, "resizable dataset3");
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

// BUGS H3: elements past 2^31 of a 2,147,483,700-element gzip dataset, via Source::read.
TEST(Hdf5Source, HugeOverIntMaxReadsPast2To31) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "tiny_huge_1d_over_maxint.hdf5";
    constexpr std::uint64_t first = 2147483654ull;  // neighbour before the 11..88 run
    const auto dump = h5t::parse_as<int>(h5t::h5dump_values(file, "huge_1d", {first}, {10}));
    // SOURCES.md: 2147483655..2147483662 are 11,22,...,88; everything else 0.
    const std::vector<int> sources_md = {0, 11, 22, 33, 44, 55, 66, 77, 88, 0};
    EXPECT_EQ(dump, sources_md) << "h5dump disagrees with SOURCES.md";
    Hdf5Source src(comm, file, fields_opt({"huge_1d"}));
    EXPECT_EQ(src.num_samples(), 2147483700ull);
    EXPECT_EQ(src.fields()[0].dtype, DType::uint8);
    // One coalesced run of 10, and the same ids in reverse (one row at a time).
    std::vector<std::uint64_t> ids(10);
    std::iota(ids.begin(), ids.end(), first);
    h5t::VectorSink run(src.fields(), 10);
    src.read(ids.data(), ids.size(), run);
    std::vector<std::uint64_t> rev(ids.rbegin(), ids.rend());
    h5t::VectorSink one(src.fields(), 10);
    src.read(rev.data(), rev.size(), one);
    for (std::size_t k = 0; k < 10; ++k) {
        EXPECT_EQ(int(run.value<std::uint8_t>(0, k)), sources_md[k]) << "element " << first + k;
        EXPECT_EQ(int(one.value<std::uint8_t>(0, k)), sources_md[9 - k]) << "element " << rev[k];
    }
    // The last element and element 2^31 itself.
    const std::vector<std::uint64_t> edge = {2147483699ull, 2147483648ull, 0};
    h5t::VectorSink e(src.fields(), 3);
    src.read(edge.data(), edge.size(), e);
    for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(int(e.value<std::uint8_t>(0, k)), 0);
    src.close();
    comm.free();
}

// BUGS H3 + H2: collective reads with uneven rank ranges across 2^31 (one rank empty when W > 1),
// split into 3-byte pieces: the same number of calls on every rank, correct values.
TEST(Hdf5Source, HugeCollectiveSplitReadsAcross2To31) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "tiny_huge_1d_over_maxint.hdf5";
    constexpr std::uint64_t lo = 2147483640ull;
    const auto truth = h5t::parse_as<int>(h5t::h5dump_values(file, "huge_1d", {lo}, {60}));
    EXPECT_EQ(truth.size(), 60u);
    auto sources_md = [](std::uint64_t i) {
        return (i >= 2147483655ull && i <= 2147483662ull) ? int(11 * (i - 2147483654ull)) : 0;
    };
    for (std::size_t k = 0; k < truth.size(); ++k) EXPECT_EQ(truth[k], sources_md(lo + k));

    const int r = h5t::rank();
    const std::uint64_t begin = 2147483645ull + 2 * static_cast<std::uint64_t>(r);
    const std::uint64_t count = (r == 1) ? 0 : 12 + 5 * static_cast<std::uint64_t>(r);
    for (const std::uint64_t max_bytes : {std::uint64_t{3}, std::uint64_t{1} << 30}) {
        Hdf5Source src(comm, file, fields_opt({"huge_1d"}, max_bytes));
        std::vector<std::uint8_t> out(count, 0xEE);
        const std::uint64_t calls =
            mpistage::detail::Hdf5Access::read_rows_collective(src, 0, begin, count, reinterpret_cast<std::byte*>(out.data()));
        const std::uint64_t rows_per_piece = max_bytes;  // 1-byte rows
        const std::uint64_t want = (h5t::max(count) + rows_per_piece - 1) / rows_per_piece;
        EXPECT_EQ(h5t::min(calls), h5t::max(calls)) << "ranks made different numbers of calls";
        EXPECT_EQ(calls, want) << "max_read_bytes " << max_bytes;
        for (std::uint64_t k = 0; k < count; ++k) {
            const std::uint64_t i = begin + k;
            const int expect = (i - lo < truth.size()) ? truth[i - lo] : sources_md(i);
            EXPECT_EQ(int(out[k]), expect) << "element " << i << " max_read_bytes " << max_bytes;
        }
        src.close();
    }
    comm.free();
}

// ---- BUGS H2: uneven and empty collective partitions ------------------------------------------

namespace {

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
            good = h5t::write_hdf5(path, {{"ten", H5T_STD_I32BE, H5T_NATIVE_INT32, {10, 3}, ten.data(), {}, 0},
                                          {"three", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {3, 4}, three.data(), {2, 4}, 1}});
        }
        MPI_Bcast(&good, 1, MPI_INT, 0, MPI_COMM_WORLD);
        ok = good == 1;
    }
};

// Block partition of n rows over the world: [begin, begin+count).
std::pair<std::uint64_t, std::uint64_t> block(std::uint64_t n) {
    const std::uint64_t w = static_cast<std::uint64_t>(h5t::size());
    const std::uint64_t r = static_cast<std::uint64_t>(h5t::rank());
    const std::uint64_t base = n / w, extra = n % w;
    const std::uint64_t begin = r * base + std::min(r, extra);
    return {begin, base + (r < extra ? 1 : 0)};
}

template <class T>
void collective_case(const Communicator& comm, const std::string& path, const std::string& field,
                     std::uint64_t begin, std::uint64_t count, std::uint64_t max_bytes,
                     const std::vector<T>& truth, std::size_t row_elems, const std::string& what) {
    Hdf5Source src(comm, path, fields_opt({field}, max_bytes));
    std::vector<T> out(count * row_elems, T(-1));
    const std::uint64_t calls = mpistage::detail::Hdf5Access::read_rows_collective(src, 
        0, begin, count, count ? reinterpret_cast<std::byte*>(out.data()) : nullptr);
    const std::uint64_t rows_per_piece =
        std::max<std::uint64_t>(max_bytes / (row_elems * sizeof(T)), 1);
    EXPECT_EQ(h5t::min(calls), h5t::max(calls)) << what;
    EXPECT_EQ(calls, (h5t::max(count) + rows_per_piece - 1) / rows_per_piece) << what;
    for (std::uint64_t k = 0; k < count * row_elems; ++k) {
        const std::uint64_t at = begin * row_elems + k;
        if (at < truth.size()) EXPECT_EQ(out[k], truth[at]) << what << " element " << at;
    }
    src.close();
}

}  // namespace

TEST(Hdf5Collective, TenRowsBlockPartitionedNoHang) {
    H2File f;
    ASSERT_TRUE(f.ok);  // same on every rank (broadcast)
    Communicator comm(MPI_COMM_WORLD);
    const auto truth = h5t::parse_as<std::int32_t>(h5t::h5dump_values(f.path, "ten"));
    EXPECT_EQ(truth.size(), 30u);
    for (int i = 0; i < 10 && truth.size() == 30u; ++i)
        for (int j = 0; j < 3; ++j) EXPECT_EQ(truth[i * 3 + j], 1000 * i + j);  // writer sanity
    const auto [begin, count] = block(10);
    EXPECT_EQ(h5t::sum(count), 10u);
    for (const std::uint64_t mb : {std::uint64_t{1} << 30, std::uint64_t{12}, std::uint64_t{25}, std::uint64_t{1}}) {
        collective_case<std::int32_t>(comm, f.path, "ten", begin, count, mb, truth, 3,
                                      "ten rows, max_read_bytes " + std::to_string(mb));
    }
    comm.free();
}

TEST(Hdf5Collective, ThreeRowsSomeRanksEmptyNoHang) {
    H2File f;
    ASSERT_TRUE(f.ok);
    Communicator comm(MPI_COMM_WORLD);
    const auto truth = h5t::parse_as<double>(h5t::h5dump_values(f.path, "three"));
    EXPECT_EQ(truth.size(), 12u);
    // Block partition (ranks >= 3 get nothing), then everything on the last rank only.
    const auto [begin, count] = block(3);
    EXPECT_EQ(h5t::sum(count), 3u);
    for (const std::uint64_t mb : {std::uint64_t{1} << 30, std::uint64_t{32}}) {
        collective_case<double>(comm, f.path, "three", begin, count, mb, truth, 4,
                                "three rows block, max_read_bytes " + std::to_string(mb));
        const bool last = h5t::rank() == h5t::size() - 1;
        collective_case<double>(comm, f.path, "three", last ? 0 : 3, last ? 3 : 0, mb, truth, 4,
                                "three rows on the last rank, max_read_bytes " + std::to_string(mb));
    }
    comm.free();
}

// A rank whose own request is invalid (rows past N) fails together with the others, which
// still complete their collective calls: same ConfigError everywhere, no hang.
TEST(Hdf5Collective, InvalidRangeOnOneRankIsAgreed) {
    H2File f;
    ASSERT_TRUE(f.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, f.path, fields_opt({"ten"}));
    const bool bad = h5t::rank() == h5t::size() - 1;
    std::vector<std::int32_t> out(30);
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError,
                          mpistage::detail::Hdf5Access::read_rows_collective(src, 0, bad ? 8 : 0, bad ? 5 : 2,
                                                   reinterpret_cast<std::byte*>(out.data())),
                          "exceed N = 10", "ten");
    // The source is still usable collectively afterwards.
    const auto [begin, count] = block(10);
    const auto calls = mpistage::detail::Hdf5Access::read_rows_collective(src, 0, begin, count, reinterpret_cast<std::byte*>(out.data()));
    EXPECT_TRUE(h5t::same_on_all_ranks(calls));
    for (std::uint64_t k = 0; k < count * 3; ++k) {
        EXPECT_EQ(out[k], static_cast<std::int32_t>(1000 * (begin + k / 3) + k % 3));
    }
    src.close();
    comm.free();
}

// ---- errors, identical on every rank (BUGS H6, H7) --------------------------------------------

TEST(Hdf5Errors, MissingFileIsIoErrorOnEveryRank) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = kDir + "no_such_file.hdf5";
    H5T_EXPECT_SAME_ERROR(mpistage::IoError, Hdf5Source(comm, path), "no_such_file.hdf5");
    comm.free();
}

// Only the last rank names a missing file: every rank still gets the same IoError (the check
// is agreed before the collective open), nobody waits in H5Fopen.
TEST(Hdf5Errors, MissingFileOnOneRankIsIoErrorOnEveryRank) {
    Communicator comm(MPI_COMM_WORLD);
    const bool bad = h5t::rank() == h5t::size() - 1;
    const std::string path = kDir + (bad ? "missing_on_one_rank.hdf5" : "chunked.hdf5");
    H5T_EXPECT_SAME_ERROR(mpistage::IoError, Hdf5Source(comm, path), "missing_on_one_rank.hdf5");
    comm.free();
}

TEST(Hdf5Errors, NotAnHdf5FileIsFormatError) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = std::string(MPISTAGE_TEST_DATA_DIR) + "/SOURCES.md";
    H5T_EXPECT_SAME_ERROR(mpistage::FormatError, Hdf5Source(comm, path), "SOURCES.md",
                          "not an HDF5 file");
    comm.free();
}

TEST(Hdf5Errors, MissingDatasetIsConfigErrorNamingIt) {
    Communicator comm(MPI_COMM_WORLD);
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError,
                          Hdf5Source(comm, kDir + "chunked.hdf5", fields_opt({"dataset1", "no_such_dataset"})),
                          "no_such_dataset");
    comm.free();
}

TEST(Hdf5Errors, FirstDimensionsDifferIsConfigError) {
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
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "test_scalar_empty_datasets_latest.hdf5";
    for (const std::string name : {"empty_int_32", "empty_float_64", "scalar_float_64",
                                   "scalar_uint_8"}) {
        H5T_EXPECT_SAME_ERROR(mpistage::ConfigError, Hdf5Source(comm, file, fields_opt({name})),
                              "nothing to shard", name);
    }
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError, Hdf5Source(comm, file), "nothing to shard");
    comm.free();
}

// BUGS H6: a missing filter plugin is an Hdf5Error naming the dataset and filter 32004.
TEST(Hdf5Errors, MissingLz4FilterNamesDatasetAndFilter) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string file = kDir + "lz4_datasets.hdf5";
    H5T_EXPECT_SAME_ERROR(mpistage::Hdf5Error, Hdf5Source(comm, file, fields_opt({"float32_bs0"})),
                          "float32_bs0", "32004");
    H5T_EXPECT_SAME_ERROR(mpistage::Hdf5Error, Hdf5Source(comm, file), "32004");
    comm.free();
}

TEST(Hdf5Errors, ZeroMaxReadBytesIsConfigError) {
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options o = fields_opt({"dataset1"});
    o.max_read_bytes = 0;
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError, Hdf5Source(comm, kDir + "chunked.hdf5", o),
                          "max_read_bytes");
    comm.free();
}

// An out-of-range id in an independent read is a clear error, not a read at a wild offset.
TEST(Hdf5Errors, ReadOutOfRangeIdIsConfigError) {
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
