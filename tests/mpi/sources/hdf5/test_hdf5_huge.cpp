// Hdf5Source across the 2^31 element boundary (BUGS H3) on a 2,147,483,700-element gzip dataset
// of ../shared/data/hdf5, known answers from SOURCES.md and h5dump: independent reads, and
// collective split reads with uneven rank ranges.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <numeric>
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

// BUGS H3: elements past 2^31 of a 2,147,483,700-element gzip dataset, via Source::read.
TEST(Hdf5Source, HugeOverIntMaxReadsPast2To31) {
    MPISTAGE_REQUIRE_TEST_DATA();
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
    MPISTAGE_REQUIRE_TEST_DATA();
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
        const std::uint64_t calls = src.collective_rows()->read_rows_collective(
            0, begin, count, reinterpret_cast<std::byte*>(out.data()));
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
