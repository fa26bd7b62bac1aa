// The content fingerprint of the Loader (issue "Collective safety"): the same relative path
// naming different files on different ranks (node-local copies that diverged) is the same
// ConfigError on every rank at construction, not a silent mix of both files. Differences at any
// shard boundary are caught by default; with LoaderOptions::verify_files, anywhere.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>

#include "../hdf5_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

using namespace mpistage;

namespace {

constexpr std::uint64_t kRows = 61;

std::int32_t value(std::uint64_t i) {
    return static_cast<std::int32_t>(i * 3 + 1);
}

/// Collective: every rank writes `<dir>/rank<r>/same.h5` with int32 x[kRows] = value(i), except
/// that on rank `odd_rank` the samples in `differ` hold -7 (odd_rank < 0: no rank differs).
/// Returns the directory of this rank's file.
std::string write_rank_file(const h5t::TempDir& dir, const std::string& name, int odd_rank,
                            const std::vector<std::uint64_t>& differ) {
    const std::string mine = dir.file(name + "-rank" + std::to_string(h5t::rank()));
    std::filesystem::create_directories(mine);
    std::vector<std::int32_t> x(kRows);
    for (std::uint64_t i = 0; i < kRows; ++i) x[i] = value(i);
    if (h5t::rank() == odd_rank) {
        for (const auto id : differ) x[id] = -7;
    }
    const bool ok = h5t::write_hdf5(
        mine + "/same.h5", {{"x", H5T_STD_I32LE, H5T_NATIVE_INT32, {kRows}, x.data(), {}, 0}});
    EXPECT_TRUE(h5t::all_true(ok));
    return mine;
}

/// Collective: constructs a loader over `<rank dir>/same.h5` (opened by the same relative path
/// on every rank) and returns what it threw.
h5t::Outcome construct_in(const std::string& rank_dir, bool verify_files) {
    const auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(rank_dir);
    h5t::Outcome out;
    {
        Communicator comm(MPI_COMM_WORLD);
        // Each rank opens its file alone (MPI_COMM_SELF): the HDF5 source's own identity check
        // at open (first/last 64 KiB) would otherwise catch these small files before the loader;
        // this test is about the loader's fingerprint, which covers sources without that check.
        Communicator self(MPI_COMM_SELF);
        Hdf5Source src(self, "same.h5");
        LoaderOptions o;
        o.plan.batch_size = 4;
        o.delivery.pin_memory = false;
        o.safety.verify_files = verify_files;
        out = h5t::catch_error<ConfigError>([&] { Loader loader(comm, src, o); });
        src.close();
        self.free();
        comm.free();
    }
    std::filesystem::current_path(cwd);
    return out;
}

}  // namespace

// Every sample but 0 differs on ranks other than 0 (the regression of the first fingerprint).
TEST(LoaderContents, SamePathDifferentFileOnOneRankIsConfigError) {
    h5t::TempDir dir;
    std::vector<std::uint64_t> all;
    for (std::uint64_t i = 1; i < kRows; ++i) all.push_back(i);
    const int w = h5t::size();
    const auto out = construct_in(write_rank_file(dir, "all", w - 1, all), false);
    if (w > 1) {
        h5t::expect_same_error(out, "ConfigError",
                               {"contents differ across ranks", "rank " + std::to_string(w - 1)});
    } else {
        EXPECT_FALSE(out.threw) << out.message;  // one rank: nothing to differ from
    }
}

// One sample differs on the last rank: the first sample of its shard, which is none of
// 0, N/2, N-1 (the samples the first fingerprint compared).
TEST(LoaderContents, DifferenceAtAShardBoundaryIsNamed) {
    const int w = h5t::size();
    const auto begins = balanced_shard_begins(kRows, w);
    const std::uint64_t at = begins[static_cast<std::size_t>(w - 1)];
    h5t::TempDir dir;
    if (w == 1) {
        const auto out = construct_in(write_rank_file(dir, "b", 0, {kRows / 3}), false);
        EXPECT_FALSE(out.threw) << out.message;
        return;
    }
    ASSERT_TRUE(at != 0 && at != kRows / 2 && at != kRows - 1) << at;  // same on every rank
    const auto out = construct_in(write_rank_file(dir, "b", w - 1, {at}), false);
    // Rank w-2 reads sample `at` as its neighbour's first sample, rank w-1 as its own.
    h5t::expect_same_error(out, "ConfigError",
                           {"sample " + std::to_string(at) + " differs between rank " +
                            std::to_string(w - 2) + " and rank " + std::to_string(w - 1)});
}

// A difference in the middle of a shard: invisible to the boundary fingerprint (it reads only
// shard boundaries), caught with verify_files, which hashes every sample of two shards.
TEST(LoaderContents, VerifyFilesCatchesADifferenceInsideAShard) {
    const int w = h5t::size();
    const auto begins = balanced_shard_begins(kRows, w);
    const auto b = begins[static_cast<std::size_t>(w - 1)];
    const std::uint64_t at = b + (kRows - b) / 3;
    ASSERT_TRUE(at != b && at != kRows - 1 && at != kRows / 2) << at;  // same on every rank
    h5t::TempDir dir;
    const std::string mine = write_rank_file(dir, "m", w - 1, {at});
    const auto quick = construct_in(mine, false);
    EXPECT_FALSE(quick.threw) << quick.message;
    const auto full = construct_in(mine, true);
    if (w > 1) {
        h5t::expect_same_error(
            full, "ConfigError",
            {"samples [" + std::to_string(b) + ", " + std::to_string(kRows) +
             ") (the shard of rank " + std::to_string(w - 1) + ") differ between rank " +
             std::to_string(w - 2) + " and rank " + std::to_string(w - 1)});
    } else {
        EXPECT_FALSE(full.threw) << full.message;
    }
}

// Identical files everywhere: no error, with and without verify_files.
TEST(LoaderContents, IdenticalFilesPass) {
    h5t::TempDir dir;
    const std::string mine = write_rank_file(dir, "same", -1, {});
    for (const bool verify : {false, true}) {
        const auto out = construct_in(mine, verify);
        EXPECT_FALSE(out.threw) << "verify_files " << verify << ": " << out.message;
    }
}
