// The Loader over HDF5 files at the edges: the documented range-for loop at every prefetch
// depth, and fewer rows than ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <map>
#include <set>
#include <iostream>
#include <sstream>

#include "../hdf5_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "loader_test_util.hpp"

using namespace mpistage;
using namespace loader_test;

// The documented loop `for (const HostBatch& b : loader.epoch(e))` works at every prefetch depth,
// including 1 (the iterator's own batch must not count as a held slot when it asks for the next).
TEST(LoaderHdf5, RangeForLoopAtEveryPrefetchDepth) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    const std::uint64_t n = h5t::kGeneratedRows;
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    for (std::size_t prefetch = 1; prefetch <= 2; ++prefetch) {
        for (std::size_t threads = 0; threads <= 1; ++threads) {
            Config c{4, Remainder::mask, Sharding::byte_range, Shuffle::none, prefetch, threads};
            Loader loader(comm, src, c.options());
            BatchChecker chk{c.remainder, c.batch, n, generated_row_ok, nullptr, c.str() + " range-for"};
            std::vector<std::int64_t> ids;
            std::uint64_t batches = 0;
            std::string error;
            try {
                for (const HostBatch& b : loader.epoch(0)) {
                    chk.check(b, &ids, false);
                    ++batches;
                }
            } catch (const std::exception& e) {
                error = e.what();
            }
            EXPECT_EQ(error, "") << c.str();
            EXPECT_EQ(h5t::min(batches), h5t::max(batches)) << c.str();
            EXPECT_EQ(batches, loader.totals().steps) << c.str();
            const auto all = h5t::allgatherv(ids);
            EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), n) << c.str();
            EXPECT_EQ(all.size(), n) << c.str();
            EXPECT_EQ(h5t::sum(chk.problems), 0u) << c.str();
        }
    }
    src.close();
    comm.free();
}

// N < W and N = 1: every rank still yields the same number of batches; with mask the ranks
// without samples get masked batches, never a zero-sample batch without flags.
TEST(LoaderHdf5, FewerRowsThanRanks) {
    h5t::TempDir dir;
    const std::string path = dir.file("tiny.h5");
    ASSERT_TRUE(h5t::make_generated_file(path, 1, false));
    const auto dumped = h5dump_rows(path, {0});
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, path);
    ASSERT_EQ(src.num_samples(), 1u);
    for (const auto rem : {Remainder::mask, Remainder::pad}) {
        Config c{3, rem, Sharding::byte_range, Shuffle::none, 2, 1};
        Loader loader(comm, src, c.options());
        BatchChecker chk{rem, 3, 1, generated_row_ok, &dumped, c.str() + " N=1"};
        const auto o = consume_epoch(loader, 0, chk, true);
        check_epoch_collectively(loader, o, c, 1, chk.what);
        EXPECT_EQ(o.batches, 1u);
        EXPECT_EQ(h5t::sum(chk.problems), 0u) << chk.what;
        EXPECT_EQ(h5t::sum(chk.dump_checks), 1u) << chk.what;
    }
    src.close();
    comm.free();
}
