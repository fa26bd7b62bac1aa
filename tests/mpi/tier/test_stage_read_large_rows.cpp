// Mapped fields with rows of at least 64 KiB (`kKernelCopyRowBytes`) are copied with `pread`
// from their files' locked pages when the reading thread was idle before the read (a trainer
// computing between steps: issue 21, where loads then ran at 0.56–0.82x the kernel's copy here;
// benchmarks/README.md, "Warm epochs"),
// with loads from the mapping otherwise and for smaller rows. Both ways serve every sample
// exactly once with the generator's bytes, in one batch, and a file truncated or rewritten after
// staging is an error naming it on every rank, never other bytes.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/raw_source.hpp"
#include "tier/mapped_rows.hpp"
#include "tier_test_util.hpp"

using namespace mpistage;
using namespace tier_test;

namespace {

constexpr std::uint64_t kRows = 97;    // 6.4 MB: under an 8 MiB `ulimit -l` at one rank
constexpr std::uint64_t kHeader = 13;  // the rows start inside a page, as IDX rows do
constexpr std::size_t kBig = detail::kKernelCopyRowBytes + 24;  // rows cross pages unaligned
/// A step's emulated compute: longer than kKernelCopyIdle, so the reads after it go through the
/// kernel.
constexpr auto kCompute = detail::kKernelCopyIdle + std::chrono::milliseconds(1);

std::byte big_byte(std::uint64_t id, std::size_t k) {
    return static_cast<std::byte>((id * 29 + k * 11 + (k >> 9)) & 0xFF);
}
std::int32_t label(std::uint64_t id) {
    return static_cast<std::int32_t>(id * 1000 - 77);
}

/// Collective: rank 0 writes `big.bin` (a header, then kRows rows of kBig bytes) and
/// `labels.bin` (kRows int32, no header) into `dir`.
void write_files(const h5t::TempDir& dir) {
    bool ok = true;
    if (h5t::rank() == 0) {
        std::ofstream big(dir.file("big.bin"), std::ios::binary);
        big.write(std::string(kHeader, '\x7f').data(), kHeader);
        std::vector<std::byte> row(kBig);
        for (std::uint64_t i = 0; i < kRows; ++i) {
            for (std::size_t k = 0; k < kBig; ++k) row[k] = big_byte(i, k);
            big.write(reinterpret_cast<const char*>(row.data()),
                      static_cast<std::streamsize>(kBig));
        }
        std::ofstream labels(dir.file("labels.bin"), std::ios::binary);
        for (std::uint64_t i = 0; i < kRows; ++i) {
            const std::int32_t l = label(i);
            labels.write(reinterpret_cast<const char*>(&l), sizeof(l));
        }
        ok = big.good() && labels.good();
    }
    ASSERT_TRUE(h5t::all_true(ok)) << "rank 0 could not write the files";
}

std::vector<RawField> fields_of(const h5t::TempDir& dir, bool with_big) {
    std::vector<RawField> out;
    if (with_big) {
        RawField big;
        big.name = "big";
        big.path = dir.file("big.bin");
        big.header_bytes = kHeader;
        big.sample_shape = {static_cast<std::int64_t>(kBig)};
        out.push_back(big);
    }
    RawField labels;
    labels.name = "labels";
    labels.path = dir.file("labels.bin");
    labels.dtype = DType::int32;
    out.push_back(labels);
    return out;
}

/// Checks slot `s`: the big row (when the batch has one) and the label are the generator's.
bool slot_is_generated(const HostBatch& b, std::size_t s) {
    const auto id = static_cast<std::uint64_t>(b.index()[s]);
    const bool with_big = b.fields().size() == 2;
    if (with_big) {
        for (std::size_t k = 0; k < kBig; ++k) {
            if (b.fields()[0].data[s * kBig + k] != big_byte(id, k)) return false;
        }
    }
    std::int32_t l = 0;
    std::memcpy(&l, b.fields()[with_big ? 1 : 0].data + s * sizeof(l), sizeof(l));
    return l == label(id);
}

LoaderOptions options(Sharding sharding, Shuffle shuffle, std::uint64_t batch) {
    LoaderOptions o;
    o.plan.batch_size = batch;
    o.plan.remainder = Remainder::pad;
    o.plan.sharding = sharding;
    o.plan.shuffle = shuffle;
    o.plan.seed = 3;
    o.pipeline.prefetch = 2;
    o.pipeline.io_threads = 1;
    o.delivery.pin_memory = false;
    o.tier.stage = Stage::memory;
    o.tier.stage_read = StageRead::map;
    return o;
}

/// Collective: stages both fields mapped, checks epoch 0, sleeps past a clock tick (file times
/// are coarse), lets rank 0 `change` big.bin (its path), and returns what epoch 1 yielded
/// with `kCompute` per step (big rows through the kernel).
Yield epoch_after_change(const std::function<void(const std::string& path)>& change) {
    h5t::TempDir dir;
    write_files(dir);
    Communicator comm(MPI_COMM_WORLD);
    Yield after;
    {
        RawSource src(comm, fields_of(dir, true));
        Loader loader(comm, src, options(Sharding::global, Shuffle::global, 4));
        EXPECT_EQ(loader.stats().stage_read_method, "mapped");
        const Yield before = consume(loader, 0, slot_is_generated);
        expect_exactly_once(loader, before, kRows, true, "before the change");
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        h5t::barrier();
        if (h5t::rank() == 0) change(dir.file("big.bin"));
        h5t::barrier();
        after = consume(loader, 1, slot_is_generated, kCompute);
    }
    comm.free();
    return after;
}

}  // namespace

// A batch of a big field and a small one, read back to back (loads) and with `kCompute`
// per step (the tier idle for at least `kKernelCopyIdle` before each read: every big row through
// the kernel): the generator's bytes, exactly once, for global and byte-range shards. A loader
// of the small field alone reads nothing through the kernel.
TEST(StageReadLargeRows, BigRowsAfterComputeThroughTheKernelSmallOnesByLoads) {
    h5t::TempDir dir;
    write_files(dir);
    Communicator comm(MPI_COMM_WORLD);
    struct Case {
        Sharding sharding;
        Shuffle shuffle;
        std::uint64_t batch;
        std::size_t prefetch;
    };
    // Batches of 4 and 3 rows (at most 1 MiB) are read on the consumer's thread; 16 rows
    // (1.05 MB) by an I/O thread that waits for the consumer's compute (one slot: at 4 ranks
    // an epoch has 2 steps, and the second is read after the first one's compute).
    for (const Case& c : {Case{Sharding::global, Shuffle::global, 4, 2},
                          Case{Sharding::byte_range, Shuffle::none, 3, 2},
                          Case{Sharding::global, Shuffle::global, 16, 1}}) {
        const std::string what =
            "sharding " + to_string(c.sharding) + ", batch " + std::to_string(c.batch);
        RawSource src(comm, fields_of(dir, true));
        LoaderOptions o = options(c.sharding, c.shuffle, c.batch);
        o.pipeline.prefetch = c.prefetch;
        Loader loader(comm, src, o);
        ASSERT_EQ(loader.stats().stage_read_method, "mapped") << what;
        expect_exactly_once(loader, consume(loader, 0, slot_is_generated), kRows, true, what);
        const std::uint64_t before = detail::kernel_row_reads();
        const Yield y = consume(loader, 1, slot_is_generated, kCompute);
        expect_exactly_once(loader, y, kRows, true, what + ", computing");
        // Every read after a step's compute goes through the kernel. The reads that fill the
        // free slots at the epoch's start (at most `prefetch` batches) may follow the last
        // epoch's reads within kKernelCopyIdle and load.
        const std::uint64_t ahead = loader.options().pipeline.prefetch * c.batch;
        const std::uint64_t valid = y.valid_ids.size();
        EXPECT_GE(detail::kernel_row_reads() - before, valid - std::min(valid, ahead)) << what;
        EXPECT_GT(detail::kernel_row_reads() - before, 0u) << what;
    }
    RawSource small(comm, fields_of(dir, false));
    Loader loader(comm, small, options(Sharding::global, Shuffle::global, 4));
    ASSERT_EQ(loader.stats().stage_read_method, "mapped");
    const std::uint64_t before = detail::kernel_row_reads();
    const Yield y = consume(loader, 0, slot_is_generated, kCompute);
    expect_exactly_once(loader, y, kRows, true, "small");
    EXPECT_EQ(detail::kernel_row_reads(), before) << "4-byte rows were read through the kernel";
    comm.free();
}

// Truncated inside a row after staging: `pread` returns short (no SIGBUS on this path), and the
// rows before the cut are followed by the size check. An error naming the file on every rank,
// and no slot with other bytes than the generator's.
TEST(StageReadLargeRows, TruncatedInsideARowIsAnErrorOnEveryRank) {
    for (const std::uint64_t keep : {std::uint64_t{0}, kHeader + 7 * kBig + 100}) {
        const Yield after = epoch_after_change([keep](const std::string& path) {
            ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(keep)), 0);
        });
        EXPECT_EQ(after.bad_slots, 0u) << "bytes of a truncated row were served";
        EXPECT_TRUE(h5t::all_true(!after.error.empty())) << after.error;
        EXPECT_NE(after.error.find("big.bin"), std::string::npos) << after.error;
    }
}

// Rewritten in place (same size, other bytes): `pread` would serve the new bytes, so the check
// after each read must see the new times: an error, not the new bytes.
TEST(StageReadLargeRows, RewrittenInPlaceIsAnErrorNotTheNewBytes) {
    const Yield after = epoch_after_change([](const std::string& path) {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(kHeader));
        const std::string other(kRows * kBig, '\x5a');
        f.write(other.data(), static_cast<std::streamsize>(other.size()));
        ASSERT_TRUE(f.good());
    });
    EXPECT_EQ(after.bad_slots, 0u) << "the rewritten bytes were served";
    EXPECT_TRUE(h5t::all_true(!after.error.empty())) << after.error;
    EXPECT_NE(after.error.find("changed after it was staged"), std::string::npos) << after.error;
}
