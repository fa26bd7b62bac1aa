// The chunk read-ahead of Shuffle::chunks (src/tier/chunk_read_ahead.hpp) on data four times
// the budget: every sample exactly once over the ranks, equal steps, each sample's bytes (the
// writer's known pattern), chunks read in one read each, the resident chunks within the budget,
// and the run's peak resident memory (VmHWM, reset through /proc/self/clear_refs) grown by no
// more than budget + ring + a constant (the whole shard is 4 × the budget: holding it fails).
// The same over TFRecord records of heavy-tailed sizes (a field of varying size): each
// record's payload, exactly once, the chunks within the budget.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "../tfrecord_test_util.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/raw_source.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "peak_rss.hpp"
#include "record_file.hpp"
#include "sources/tfrecord/framing.hpp"

using namespace mpistage;

namespace {

constexpr std::uint64_t kRecordBytes = 4096;
constexpr std::uint64_t kRecordsPerRank = 16384;       // 64 MiB per rank
constexpr std::uint64_t kBudget = 16ull << 20;         // a quarter of it
constexpr std::uint64_t kConstantBytes = 24ull << 20;  // allocator, MPI, thread stacks

using mpistage::testing::reset_peak;
using mpistage::testing::rss_measures_the_code;
using mpistage::testing::status_bytes;

/// Shuffle::chunks from the files (stage none: the budget sizes the chunks), 2 I/O threads.
LoaderOptions chunk_options(std::uint64_t batch, std::size_t prefetch, std::uint64_t seed,
                            std::uint64_t budget) {
    LoaderOptions o;
    o.plan.batch_size = batch;
    o.plan.sharding = Sharding::global;
    o.plan.shuffle = Shuffle::chunks;
    o.plan.remainder = Remainder::mask;
    o.plan.seed = seed;
    o.pipeline.prefetch = prefetch;
    o.pipeline.io_threads = 2;
    o.delivery.device = "cpu";
    o.tier.stage_budget_bytes = budget;
    return o;
}

/// Collective: equal steps on every rank, and this epoch's valid ids over all ranks are 0..n-1
/// once each.
void expect_every_sample_once(const std::vector<std::int64_t>& ids, std::uint64_t steps,
                              std::uint64_t n, std::uint64_t epoch) {
    EXPECT_TRUE(h5t::same_on_all_ranks(steps)) << "epoch " << epoch;
    std::vector<std::int64_t> all = h5t::allgatherv(ids);
    std::sort(all.begin(), all.end());
    ASSERT_EQ(all.size(), n) << "epoch " << epoch;
    for (std::uint64_t i = 0; i < n; ++i) {
        ASSERT_EQ(all[i], static_cast<std::int64_t>(i)) << "epoch " << epoch << ": not once";
    }
}

}  // namespace

TEST(ChunkReadAhead, ExactlyOnceWithinTheBudgetOnDataFourTimesIt) {
    const bool peak_supported = reset_peak() && status_bytes("VmHWM") > 0;
    h5t::TempDir dir;
    const std::uint64_t n = kRecordsPerRank * static_cast<std::uint64_t>(h5t::size()) + 37;
    const std::string path = dir.file("records.bin");
    tier_test::write_pattern_records(path, n, kRecordBytes, 7);
    Communicator comm(MPI_COMM_WORLD);
    RawSource src(comm, {tier_test::record_field(path, kRecordBytes)});
    const LoaderOptions o = chunk_options(32, 4, 3, kBudget);
    const std::uint64_t ring = 4 * 32 * kRecordBytes;
    reset_peak();
    const std::uint64_t before = status_bytes("VmRSS");
    std::uint64_t wrong = 0;
    {
        Loader loader(comm, src, o);
        EXPECT_NE(loader.stats().shuffle_note.find("derived from the budget of 16777216"),
                  std::string::npos)
            << loader.stats().shuffle_note;
        for (std::uint64_t e = 0; e < 2; ++e) {
            std::vector<std::int64_t> ids;
            std::uint64_t steps = 0;
            for (const HostBatch& b : loader.epoch(e)) {
                ++steps;
                const auto* x = b.fields().at(0).as<std::uint8_t>();
                for (std::size_t j = 0; j < b.size(); ++j) {
                    if (!b.valid()[j]) continue;
                    const auto id = static_cast<std::uint64_t>(b.index()[j]);
                    ids.push_back(b.index()[j]);
                    for (std::uint64_t k = 0; k < kRecordBytes; k += 511) {
                        wrong += x[j * kRecordBytes + k] != static_cast<unsigned char>(id * 7 + k);
                    }
                }
            }
            expect_every_sample_once(ids, steps, n, e);
        }
        const ReadAheadCounters& r = loader.stats().read_ahead;
        EXPECT_GT(r.chunks_read, 0u) << "the read-ahead did not run";
        EXPECT_EQ(r.budget_bytes, kBudget);
        EXPECT_LE(r.peak_resident_bytes, kBudget) << "chunks held beyond the budget";
        EXPECT_EQ(r.over_budget_reads, 0u);
        // A chunk is one read: at most the rank's share of chunks per epoch, plus the chunks
        // its part shares with a neighbour's (2 per epoch).
        const std::uint64_t per_chunk =
            o.plan.chunk_samples == 0 ? loader.options().plan.chunk_samples : o.plan.chunk_samples;
        EXPECT_LE(r.chunks_read, 2 * (n / per_chunk / static_cast<std::uint64_t>(h5t::size()) + 3));
    }
    EXPECT_EQ(wrong, 0u) << "bytes of samples read wrong";
    const std::uint64_t growth = status_bytes("VmHWM") - std::min(before, status_bytes("VmHWM"));
    if (peak_supported && rss_measures_the_code()) {
        EXPECT_LE(growth, kBudget + ring + kConstantBytes)
            << "peak RSS grew by " << growth << " bytes on a budget of " << kBudget;
    }
    comm.free();
}

namespace {

/// Record i's payload size: mostly 40-400 bytes, one in 37 of 16 KiB (a heavy tail).
std::uint64_t record_size(std::uint64_t i) {
    return i % 37 == 5 ? 16384 : 40 + (i * 7919) % 361;
}

}  // namespace

TEST(ChunkReadAhead, RecordsOfVaryingSizeExactlyOnceWithinTheBudget) {
    Communicator comm(MPI_COMM_WORLD);
    const std::uint64_t n = 3000 * static_cast<std::uint64_t>(comm.size()) + 11;
    const std::string path = tfrecord_test::shared_tmp_dir(comm) + "/tail.tfrecord";
    std::uint64_t payload = 0;
    for (std::uint64_t i = 0; i < n; ++i) payload += record_size(i);
    if (comm.rank() == 0) {
        std::vector<std::uint8_t> bytes, rec;
        for (std::uint64_t i = 0; i < n; ++i) {
            rec.resize(record_size(i));
            for (std::size_t k = 0; k < rec.size(); ++k) {
                rec[k] = static_cast<std::uint8_t>(i * 13 + k);
            }
            tfrecord::append_record(bytes, rec.data(), rec.size());
        }
        tfrecord_test::spit(path, bytes);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    TfRecordSource src(comm, {path});
    const std::uint64_t budget = payload / 4 / static_cast<std::uint64_t>(comm.size());
    const LoaderOptions o = chunk_options(16, 3, 11, budget);
    std::uint64_t wrong = 0;
    Loader loader(comm, src, o);
    EXPECT_EQ(loader.stats().shuffle_note.find("not read ahead"), std::string::npos)
        << loader.stats().shuffle_note;
    for (std::uint64_t e = 0; e < 2; ++e) {
        std::vector<std::int64_t> ids;
        std::uint64_t steps = 0;
        for (const HostBatch& b : loader.epoch(e)) {
            ++steps;
            const HostField& f = b.fields().at(0);
            for (std::size_t j = 0; j < b.size(); ++j) {
                if (!b.valid()[j]) continue;
                const auto id = static_cast<std::uint64_t>(b.index()[j]);
                ids.push_back(b.index()[j]);
                const std::int64_t size = f.offsets[j + 1] - f.offsets[j];
                if (static_cast<std::uint64_t>(size) != record_size(id)) {
                    ++wrong;
                    continue;
                }
                const auto* v = f.as<std::uint8_t>() + f.offsets[j];
                for (std::int64_t k = 0; k < size; k += 97) {
                    wrong +=
                        v[k] != static_cast<std::uint8_t>(id * 13 + static_cast<std::uint64_t>(k));
                }
            }
        }
        expect_every_sample_once(ids, steps, n, e);
    }
    EXPECT_EQ(wrong, 0u) << "records read wrong (size or bytes)";
    const ReadAheadCounters& r = loader.stats().read_ahead;
    EXPECT_GT(r.chunks_read, 0u) << "the records were not read ahead by chunks";
    EXPECT_LE(r.peak_resident_bytes, budget) << "chunks held beyond the budget";
    EXPECT_EQ(r.over_budget_reads, 0u);
    // A chunk of records is one read (its records are adjacent): no more than the rank's share.
    const std::uint64_t per_chunk = loader.options().plan.chunk_samples;
    EXPECT_LE(r.chunks_read, 2 * (n / per_chunk / static_cast<std::uint64_t>(comm.size()) + 3));
    loader.close();
    comm.free();
}
