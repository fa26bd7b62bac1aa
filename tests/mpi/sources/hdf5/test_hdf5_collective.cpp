// BUGS H2: uneven and empty collective partitions of Hdf5Source's collective reads: no hang, the
// same number of calls on every rank, values equal to what rank 0 wrote.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "h5t_checks.hpp"
#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
#include "hdf5_test_files.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "sources/collective_rows.hpp"

using h5src::fields_opt;
using h5src::H2File;
using mpistage::Communicator;
using mpistage::Hdf5Source;

namespace {

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
    const std::uint64_t calls = src.collective_rows()->read_rows_collective(
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
    for (const std::uint64_t mb :
         {std::uint64_t{1} << 30, std::uint64_t{12}, std::uint64_t{25}, std::uint64_t{1}}) {
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
        collective_case<double>(
            comm, f.path, "three", last ? 0 : 3, last ? 3 : 0, mb, truth, 4,
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
    H5T_EXPECT_SAME_ERROR(
        mpistage::ConfigError,
        src.collective_rows()->read_rows_collective(0, bad ? 8 : 0, bad ? 5 : 2,
                                                    reinterpret_cast<std::byte*>(out.data())),
        "exceed N = 10", "ten");
    // The source is still usable collectively afterwards.
    const auto [begin, count] = block(10);
    const auto calls = src.collective_rows()->read_rows_collective(
        0, begin, count, reinterpret_cast<std::byte*>(out.data()));
    EXPECT_TRUE(h5t::same_on_all_ranks(calls));
    for (std::uint64_t k = 0; k < count * 3; ++k) {
        EXPECT_EQ(out[k], static_cast<std::int32_t>(1000 * (begin + k / 3) + k % 3));
    }
    src.close();
    comm.free();
}

// A read of a closed source throws ConfigError naming the file, both the independent read and
// the collective one (agreed on every rank), instead of returning without writing the rows.
TEST(Hdf5Collective, ReadsAfterCloseThrow) {
    H2File f;
    ASSERT_TRUE(f.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, f.path, fields_opt({"ten"}));
    src.close();
    EXPECT_EQ(src.num_samples(), 10u);  // still valid after close()
    const std::vector<std::uint64_t> ids = {0, 1};
    h5t::VectorSink sink(src.fields(), ids.size());
    try {
        src.read(ids.data(), ids.size(), sink);
        ADD_FAILURE() << "read after close() did not throw";
    } catch (const mpistage::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(f.path + ": read of a closed source"),
                  std::string::npos)
            << e.what();
    }
    std::vector<std::int32_t> out(30);
    H5T_EXPECT_SAME_ERROR(mpistage::ConfigError,
                          src.collective_rows()->read_rows_collective(
                              0, 0, 2, reinterpret_cast<std::byte*>(out.data())),
                          "read of a closed source", f.path);
    src.close();  // a second close() is harmless
    comm.free();
}
