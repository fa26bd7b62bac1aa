// How the memory tier takes in a shard (LoaderOptions::stage_read, issue 21): mapped from the
// files' pages or copied into a shared-memory window. Both serve every sample exactly once with
// the generator's bytes and the same batches; `auto` maps where it applies and says why it
// copied elsewhere; `map` where it does not apply is the same ConfigError on every rank, naming
// why; `stage_read` without staging is refused; a truncation while the touch pass runs is an
// error, not a crash.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "h5t_checks.hpp"
#include "h5t_files.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/raw_source.hpp"
#include "tier/touch_pass.hpp"
#include "tier_test_util.hpp"

using namespace mpistage;
using namespace tier_test;

namespace {

constexpr std::uint64_t kRows = 211;
constexpr std::size_t kImage = 3 * 5;

std::uint8_t pixel(std::uint64_t id, std::size_t k) {
    return static_cast<std::uint8_t>((id * 29 + k * 11 + (id >> 3)) & 0xFF);
}
std::int32_t label(std::uint64_t id) {
    return static_cast<std::int32_t>(id * 1000 - 77);
}

/// Collective: rank 0 writes images uint8 [kRows,3,5] and labels int32 [kRows] (little-endian,
/// the native order here, or big-endian; contiguous, or images chunked).
std::string write_file(const h5t::TempDir& dir, const std::string& name, bool labels_big_endian,
                       bool images_chunked) {
    const std::string path = dir.file(name);
    int ok = 1;
    if (h5t::rank() == 0) {
        std::vector<std::uint8_t> images(kRows * kImage);
        std::vector<std::int32_t> labels(kRows);
        for (std::uint64_t i = 0; i < kRows; ++i) {
            for (std::size_t k = 0; k < kImage; ++k) images[i * kImage + k] = pixel(i, k);
            labels[i] = label(i);
        }
        h5t::DatasetSpec img{
            "images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {kRows, 3, 5}, images.data(), {}, 0};
        if (images_chunked) img.chunk = {16, 3, 5};
        h5t::DatasetSpec lab{"labels",
                             labels_big_endian ? H5T_STD_I32BE : H5T_STD_I32LE,
                             H5T_NATIVE_INT32,
                             {kRows},
                             labels.data(),
                             {},
                             0};
        ok = h5t::write_hdf5(path, {img, lab}) ? 1 : 0;
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    EXPECT_EQ(ok, 1);
    return path;
}

bool slot_is_generated(const HostBatch& b, std::size_t s) {
    const auto id = static_cast<std::uint64_t>(b.index()[s]);
    for (std::size_t k = 0; k < kImage; ++k) {
        if (b.fields()[0].data[s * kImage + k] != static_cast<std::byte>(pixel(id, k))) {
            return false;
        }
    }
    std::int32_t l = 0;
    std::memcpy(&l, b.fields()[1].data + s * sizeof(l), sizeof(l));
    return l == label(id);
}

struct Case {
    std::uint64_t batch;
    Remainder remainder;
    Sharding sharding;
    Shuffle shuffle;
    std::size_t prefetch;
    std::size_t threads;
};

const std::vector<Case> kCases = {
    {7, Remainder::pad, Sharding::global, Shuffle::global, 2, 1},
    {5, Remainder::drop, Sharding::byte_range, Shuffle::none, 1, 0},
    {16, Remainder::mask, Sharding::byte_range, Shuffle::local, 3, 2},
};

LoaderOptions options_of(const Case& c, StageRead read, int ranks_per_node = 0) {
    LoaderOptions o;
    o.plan.batch_size = c.batch;
    o.plan.remainder = c.remainder;
    o.plan.sharding = c.sharding;
    o.plan.shuffle = c.shuffle;
    o.plan.seed = 5;
    o.pipeline.prefetch = c.prefetch;
    o.pipeline.io_threads = c.threads;
    o.delivery.pin_memory = false;
    o.tier.stage = Stage::memory;
    o.tier.stage_read = read;
    o.tier.stage_ranks_per_node = ranks_per_node;
    return o;
}

std::string describe(const Case& c, StageRead read) {
    return "B=" + std::to_string(c.batch) + " " + to_string(c.remainder) + " " +
           to_string(c.sharding) + " " + to_string(c.shuffle) + " prefetch " +
           std::to_string(c.prefetch) + " threads " + std::to_string(c.threads) + " stage_read " +
           to_string(read);
}

}  // namespace

// Mapped and copied: exactly once, the generator's bytes, and the same ids in the same batches
// on every rank (the tier changes where bytes come from, not the plan).
TEST(StageRead, MappedAndCopiedServeTheSameBatchesWithTheGeneratorsRows) {
    h5t::TempDir dir;
    const std::string path = write_file(dir, "le.h5", false, false);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, path);
    for (const auto& c : kCases) {
        std::map<StageRead, std::vector<std::int64_t>> order;
        for (StageRead read : {StageRead::map, StageRead::copy, StageRead::automatic}) {
            const std::string what = describe(c, read);
            Loader loader(comm, src, options_of(c, read));
            EXPECT_EQ(loader.stats().tier, "memory") << what;
            EXPECT_EQ(loader.stats().stage_read_method,
                      read == StageRead::copy ? "independent" : "mapped")
                << what;
            EXPECT_EQ(loader.stats().stage_read_note, "") << what;
            // Every rank's shard, each field's block rounded up to 64 bytes at most.
            const std::uint64_t staged = h5t::sum(loader.stats().staged_bytes);
            EXPECT_GE(staged, kRows * (kImage + 4)) << what;
            EXPECT_LE(staged, kRows * (kImage + 4) + 2 * 63 * h5t::size()) << what;
            for (std::uint64_t e = 0; e < 2; ++e) {
                std::vector<std::int64_t> ids;
                const Yield y = consume(loader, e, [&](const HostBatch& b, std::size_t s) {
                    ids.push_back(b.index()[s]);
                    return slot_is_generated(b, s);
                });
                expect_exactly_once(loader, y, kRows, c.remainder != Remainder::drop,
                                    what + " epoch " + std::to_string(e));
                order[read].insert(order[read].end(), ids.begin(), ids.end());
            }
        }
        EXPECT_EQ(order[StageRead::map], order[StageRead::copy]) << describe(c, StageRead::map);
        EXPECT_EQ(order[StageRead::automatic], order[StageRead::copy])
            << describe(c, StageRead::automatic);
    }
    src.close();
    comm.free();
}

// Where mapping does not apply, auto copies (the same note on every rank, naming why) and still
// serves the generator's rows; map is the same ConfigError on every rank, naming why.
TEST(StageRead, AutoCopiesAndMapIsRefusedWhereMappingDoesNotApply) {
    h5t::TempDir dir;
    struct Refusal {
        std::string file;
        int ranks_per_node;
        std::string why;
    };
    std::vector<Refusal> refusals = {
        {write_file(dir, "be.h5", true, false), 0, "field 'labels' is not stored row after row"},
        {write_file(dir, "chunked.h5", false, true), 0,
         "field 'images' is not stored row after row"},
    };
    if (h5t::size() > 1) {  // every rank its own "node": mapped pages are not exposed to gets
        refusals.push_back({write_file(dir, "nodes.h5", false, false), 1,
                            "the job spans " + std::to_string(h5t::size()) + " nodes"});
    }
    Communicator comm(MPI_COMM_WORLD);
    const Case c = kCases[0];
    for (const auto& r : refusals) {
        Hdf5Source src(comm, r.file);
        const std::string what = r.file + " ranks_per_node " + std::to_string(r.ranks_per_node);
        {
            Loader loader(comm, src, options_of(c, StageRead::automatic, r.ranks_per_node));
            const LoaderStats& st = loader.stats();
            EXPECT_NE(st.stage_read_method, "mapped") << what;
            EXPECT_NE(st.stage_read_note.find(r.why), std::string::npos)
                << what << ": " << st.stage_read_note;
            EXPECT_NE(st.stage_read_note.find("copied"), std::string::npos) << what;
            EXPECT_TRUE(h5t::same_on_all_ranks(h5t::fnv(st.stage_read_note))) << what;
            const Yield y = consume(loader, 0, slot_is_generated);
            expect_exactly_once(loader, y, kRows, true, what);
        }
        H5T_EXPECT_SAME_ERROR(ConfigError,
                              Loader(comm, src, options_of(c, StageRead::map, r.ranks_per_node)),
                              "stage_read map", r.why);
        src.close();
    }
    comm.free();
}

// A file truncated after it was mapped: its pages raise SIGBUS at their next load, which the
// tier turns into an IoError; the re-read from the file fails too (it is shorter), so every rank
// ends the epoch with an error naming the file, instead of a crash.
TEST(StageRead, FileTruncatedAfterMappingIsAnErrorOnEveryRankNotACrash) {
    h5t::TempDir dir;
    const std::string path = write_file(dir, "cut.h5", false, false);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, path);
    {
        Loader loader(comm, src, options_of(kCases[0], StageRead::map));
        ASSERT_EQ(loader.stats().stage_read_method, "mapped");
        const Yield before = consume(loader, 0, slot_is_generated);
        expect_exactly_once(loader, before, kRows, true, "before the truncation");
        h5t::barrier();
        if (h5t::rank() == 0) ASSERT_EQ(::truncate(path.c_str(), 0), 0);
        h5t::barrier();
        const Yield after = consume(loader, 1, slot_is_generated);
        EXPECT_NE(after.error.find("cut.h5"), std::string::npos) << after.error;
        EXPECT_EQ(after.bad_slots, 0u) << "a slot served other bytes than the generator's";
        EXPECT_TRUE(h5t::all_true(!after.error.empty())) << after.error;
    }
    src.close();
    comm.free();
}

namespace {

constexpr std::uint64_t kRawHeader = 13;

/// Collective: rank 0 writes a raw file: a 13-byte header, then the images of kRows rows.
std::string write_raw(const h5t::TempDir& dir) {
    const std::string path = dir.file("raw.bin");
    if (h5t::rank() == 0) {
        std::string bytes(kRawHeader, '\x7f');
        for (std::uint64_t i = 0; i < kRows; ++i) {
            for (std::size_t k = 0; k < kImage; ++k)
                bytes.push_back(static_cast<char>(pixel(i, k)));
        }
        std::ofstream(path, std::ios::binary)
            .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    h5t::barrier();
    return path;
}

RawField raw_field(const std::string& path) {
    RawField f;
    f.name = "images";
    f.path = path;
    f.header_bytes = kRawHeader;
    f.sample_shape = {3, 5};
    return f;
}

bool raw_slot_is_generated(const HostBatch& b, std::size_t s) {
    const auto id = static_cast<std::uint64_t>(b.index()[s]);
    for (std::size_t k = 0; k < kImage; ++k) {
        if (b.fields()[0].data[s * kImage + k] != static_cast<std::byte>(pixel(id, k))) {
            return false;
        }
    }
    return true;
}

}  // namespace

// A raw (IDX-like) file of one-byte records is mapped too; its header is skipped.
TEST(StageRead, RawRecordsAreMappedPastTheHeader) {
    h5t::TempDir dir;
    const std::string path = write_raw(dir);
    Communicator comm(MPI_COMM_WORLD);
    RawSource src(comm, {raw_field(path)});
    Loader loader(comm, src, options_of(kCases[0], StageRead::map));
    EXPECT_EQ(loader.stats().stage_read_method, "mapped");
    const Yield y = consume(loader, 0, raw_slot_is_generated);
    expect_exactly_once(loader, y, kRows, true, "raw mapped");
    comm.free();
}

namespace {

/// Collective: maps a raw file, checks epoch 0, lets rank 0 `change` the file (its path), and
/// returns what epoch 1 yielded on this rank.
Yield epoch_after_change(const std::function<void(const std::string& path)>& change) {
    h5t::TempDir dir;
    const std::string path = write_raw(dir);
    Communicator comm(MPI_COMM_WORLD);
    Yield after;
    {
        RawSource src(comm, {raw_field(path)});
        Loader loader(comm, src, options_of(kCases[0], StageRead::map));
        EXPECT_EQ(loader.stats().stage_read_method, "mapped");
        const Yield before = consume(loader, 0, raw_slot_is_generated);
        expect_exactly_once(loader, before, kRows, true, "before the change");
        // File times come from the kernel's coarse clock (a tick of 1-10 ms): let one pass
        // since the mapping, as any change by a later job step would.
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        h5t::barrier();
        if (h5t::rank() == 0) change(path);
        h5t::barrier();
        after = consume(loader, 1, raw_slot_is_generated);
    }
    comm.free();
    return after;
}

}  // namespace

// A truncation inside the file's last page raises no SIGBUS: the kernel zero-fills the rest of
// that page, so the last rows would read as zeros. The size check after each mapped read sees
// it: an error on every rank, and no slot with other bytes than the generator's.
TEST(StageRead, TruncationInsideAPageServesNoZeros) {
    const Yield after = epoch_after_change([](const std::string& path) {
        ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(kRawHeader + kRows * kImage - 7)), 0);
    });
    EXPECT_EQ(after.bad_slots, 0u) << "zeros of the truncated page were served";
    EXPECT_TRUE(h5t::all_true(!after.error.empty())) << after.error;
    EXPECT_NE(after.error.find("raw.bin"), std::string::npos) << after.error;
}

// A file rewritten in place after it was mapped (same size, other bytes): the mapped pages now
// show the new bytes, and reading them again from the file would serve them too. The check
// after each mapped read sees the new times, and the tier's error is not retried from the
// file: an error on every rank, and no slot with other bytes than the generator's.
TEST(StageRead, FileRewrittenInPlaceIsAnErrorNotTheNewBytes) {
    const Yield after = epoch_after_change([](const std::string& path) {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(kRawHeader));
        const std::string other(kRows * kImage, '\x5a');
        f.write(other.data(), static_cast<std::streamsize>(other.size()));
        ASSERT_TRUE(f.good());
    });
    EXPECT_EQ(after.bad_slots, 0u) << "the rewritten bytes were served";
    EXPECT_TRUE(h5t::all_true(!after.error.empty())) << after.error;
    EXPECT_NE(after.error.find("changed after it was staged"), std::string::npos) << after.error;
}

namespace {

constexpr std::uint64_t kBigRows = 16384;  // of one 4 KiB page each: 64 MiB
constexpr std::size_t kPageRow = 4096;

std::byte big_byte(std::uint64_t id, std::size_t k) {
    return static_cast<std::byte>((id * 131 + k * 7) & 0xFF);
}

}  // namespace

// With global sharding the tier starts a thread that loads one byte per page of the node's
// mapped rows from the first epoch on (the touch pass). A file truncated while that pass runs
// faults in it (SIGBUS); the pass catches the fault and ends, and the reads report the
// truncation: an error naming the file on every rank, no slot with other bytes than the
// generator's, and a loader that is then destroyed without a hang (the destructor stops and
// joins the pass). The pass is held after its first piece (`hold_touch_passes`) until the file
// is truncated, so it is certainly running then; every rank's pass must end by the fault.
// Skipped where the mapped staging is refused (mlock of each rank's share of 64 MiB over
// RLIMIT_MEMLOCK without CAP_IPC_LOCK): `auto` then copies, and no pass reads the file.
TEST(StageRead, TruncatedWhileTheTouchPassRunsIsAnErrorNotACrash) {
    h5t::TempDir dir;
    const std::string path = dir.file("big.bin");
    bool written = true;
    if (h5t::rank() == 0) {
        std::vector<std::byte> row(kPageRow);
        std::ofstream out(path, std::ios::binary);
        for (std::uint64_t i = 0; i < kBigRows; ++i) {
            for (std::size_t k = 0; k < kPageRow; ++k) row[k] = big_byte(i, k);
            out.write(reinterpret_cast<const char*>(row.data()),
                      static_cast<std::streamsize>(row.size()));
        }
        written = out.good();
    }
    ASSERT_TRUE(h5t::all_true(written)) << "rank 0 could not write " << path;
    RawField f;
    f.name = "rows";
    f.path = path;
    f.sample_shape = {kPageRow};
    Communicator comm(MPI_COMM_WORLD);
    const std::uint64_t faults_before = detail::touch_pass_faults();
    std::string skipped;
    {
        RawSource src(comm, {f});
        LoaderOptions o = options_of(kCases[0], StageRead::automatic);
        o.plan.batch_size = 64;
        detail::hold_touch_passes(true);
        Loader loader(comm, src, o);
        if (loader.stats().stage_read_method != "mapped") {  // the same on every rank
            detail::hold_touch_passes(false);
            skipped = loader.stats().stage_read_note;
        } else {
            h5t::barrier();
            bool truncated = true;
            if (h5t::rank() == 0) truncated = ::truncate(path.c_str(), 0) == 0;
            // Released only once the file is truncated (the collective orders it): a rank that
            // let its pass go on earlier could finish the whole file first, with no fault.
            const bool all_truncated = h5t::all_true(truncated);
            detail::hold_touch_passes(false);
            ASSERT_TRUE(all_truncated) << "truncate of " << path << " failed";
            const Yield y = consume(loader, 0, [](const HostBatch& b, std::size_t s) {
                const auto id = static_cast<std::uint64_t>(b.index()[s]);
                for (std::size_t k = 0; k < kPageRow; ++k) {
                    if (b.fields()[0].data[s * kPageRow + k] != big_byte(id, k)) return false;
                }
                return true;
            });
            EXPECT_EQ(y.bad_slots, 0u) << "a slot served other bytes than the generator's";
            EXPECT_TRUE(h5t::all_true(!y.error.empty())) << y.error;
            EXPECT_NE(y.error.find("big.bin"), std::string::npos) << y.error;
            // The released pass resumes within a millisecond; the destructor would stop it
            // before its next piece. Wait for its fault first (10 s at most).
            for (int i = 0; i < 10000 && detail::touch_pass_faults() == faults_before; ++i) {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        }
    }  // the loader's destruction joins the pass
    comm.free();
    if (!skipped.empty()) GTEST_SKIP() << "mapped staging refused here: " << skipped;
    EXPECT_EQ(detail::touch_pass_faults(), faults_before + 1)
        << "the touch pass did not end by the truncation's fault";
}

// stage_read says how a staged shard is taken in: without staging it is refused, not ignored.
TEST(StageRead, WithoutStagingIsAConfigError) {
    LoaderOptions o = options_of(kCases[0], StageRead::map);
    o.tier.stage = Stage::none;
    try {
        o.validate();
        ADD_FAILURE() << "stage_read map with stage none was accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("stage_read map"), std::string::npos) << e.what();
    }
    o.tier.stage_read = StageRead::automatic;
    EXPECT_NO_THROW(o.validate());
    EXPECT_EQ(parse_stage_read("copy"), StageRead::copy);
    EXPECT_THROW(parse_stage_read("mmap"), ConfigError);
}
