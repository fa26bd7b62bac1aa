// The memory bound of the memory tier: a run's peak resident memory (VmHWM, reset through
// /proc/self/clear_refs before the loader is built) grows by at least the staged shard (it is
// really resident) and by no more than staged bytes + ring + a constant; without staging, by
// no more than the ring + the constant (the file tier never holds the dataset).
#include <gtest/gtest.h>
#include <mpi.h>

#include <fstream>
#include <string>
#include <vector>

#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/raw_source.hpp"
#include "peak_rss.hpp"
#include "record_file.hpp"

using namespace mpistage;

namespace {

constexpr std::uint64_t kRecordBytes = 4096;
constexpr std::uint64_t kRecordsPerRank = 8192;        // 32 MiB per rank
constexpr std::uint64_t kConstantBytes = 24ull << 20;  // allocator, MPI windows, thread stacks

using mpistage::testing::reset_peak;
using mpistage::testing::status_bytes;

struct Peak {
    std::uint64_t growth = 0;  // VmHWM after the run - VmRSS before it
    std::uint64_t staged = 0;
    std::string tier;
};

Peak run(const Communicator& comm, const Source& src, Stage stage) {
    LoaderOptions o;
    o.plan.batch_size = 64;
    o.plan.shuffle = Shuffle::local;  // byte_range: each rank touches its own shard only
    o.plan.remainder = Remainder::pad;
    o.pipeline.prefetch = 4;
    o.pipeline.io_threads = 1;
    o.delivery.pin_memory = false;
    o.tier.stage = stage;
    reset_peak();
    const std::uint64_t before = status_bytes("VmRSS");
    Peak p;
    {
        Loader loader(comm, src, o);
        for (std::uint64_t e = 0; e < 2; ++e) {
            for (const HostBatch& b : loader.epoch(e)) (void)b;
        }
        p.staged = loader.stats().staged_bytes;
        p.tier = loader.stats().tier;
    }
    p.growth = status_bytes("VmHWM") - std::min(before, status_bytes("VmHWM"));
    return p;
}

}  // namespace

TEST(MemoryTierBound, PeakResidentMemoryIsStagedBytesPlusRingPlusConstant) {
    const bool supported = reset_peak() && status_bytes("VmHWM") > 0;
    if (!h5t::all_true(supported)) GTEST_SKIP() << "no /proc/self/clear_refs peak reset";
    h5t::TempDir dir;
    const std::uint64_t n = kRecordsPerRank * static_cast<std::uint64_t>(h5t::size());
    const std::string path = dir.file("records.bin");
    tier_test::write_pattern_records(path, n, kRecordBytes, 1);
    Communicator comm(MPI_COMM_WORLD);
    RawSource src(comm, {tier_test::record_field(path, kRecordBytes)});
    const std::uint64_t ring = 4 * 64 * kRecordBytes;
    const Peak staged = run(comm, src, Stage::memory);
    EXPECT_EQ(staged.tier, "memory");
    EXPECT_EQ(staged.staged, kRecordsPerRank * kRecordBytes);
    // Lower bound: the shard is really resident (1 MiB of slack: memory the process freed
    // during the run, e.g. trimmed by the allocator, lowers the measured growth).
    EXPECT_GE(staged.growth + (1u << 20), staged.staged) << "the staged shard is not resident";
    EXPECT_LE(staged.growth, staged.staged + ring + kConstantBytes)
        << "peak RSS grew by " << staged.growth << " bytes for " << staged.staged
        << " staged bytes and a " << ring << "-byte ring";
    const Peak file = run(comm, src, Stage::none);
    EXPECT_EQ(file.tier, "file");
    EXPECT_LE(file.growth, ring + kConstantBytes) << "the file tier held " << file.growth;
    comm.free();
}
