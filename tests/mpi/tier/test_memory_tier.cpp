// The memory tier (issue "Stage the data") over TFRecord: ragged payloads and decoded Example
// fields staged once and served from node memory (and by MPI_Get across "nodes"), exactly once
// with every byte equal to the generator's; the stage budget; differing stage options.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>

#include "h5t_checks.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "tier_test_util.hpp"

using namespace mpistage;
using namespace tier_test;

namespace {

struct Case {
    std::uint64_t batch;
    Remainder remainder;
    Sharding sharding;
    Shuffle shuffle;
    std::size_t prefetch;
    std::size_t threads;
};

const std::vector<Case> kCases = {
    {7, Remainder::pad, Sharding::byte_range, Shuffle::none, 2, 1},
    {16, Remainder::mask, Sharding::byte_range, Shuffle::local, 3, 2},
    {5, Remainder::drop, Sharding::global, Shuffle::global, 1, 0},
    {13, Remainder::mask, Sharding::global, Shuffle::global, 2, 2},
};

LoaderOptions options_of(const Case& c, Stage stage, int ranks_per_node) {
    LoaderOptions o;
    o.plan.batch_size = c.batch;
    o.plan.remainder = c.remainder;
    o.plan.sharding = c.sharding;
    o.plan.shuffle = c.shuffle;
    o.plan.seed = 99;
    o.pipeline.prefetch = c.prefetch;
    o.pipeline.io_threads = c.threads;
    o.delivery.pin_memory = false;
    o.tier.stage = stage;
    o.tier.stage_ranks_per_node = ranks_per_node;
    return o;
}

std::string describe(const Case& c, Stage stage, int ranks_per_node) {
    return "B=" + std::to_string(c.batch) + " " + to_string(c.remainder) + " " +
           to_string(c.shuffle) + " prefetch " + std::to_string(c.prefetch) + " threads " +
           std::to_string(c.threads) + " stage " + to_string(stage) + " ranks_per_node " +
           std::to_string(ranks_per_node);
}

/// Every case, two epochs each, from the file, from memory, and from memory across "nodes".
void sweep(const Source& src, std::uint64_t n,
           const std::function<bool(const HostBatch&, std::size_t)>& slot_ok) {
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::pair<Stage, int>> tiers = {
        {Stage::none, 0}, {Stage::memory, 0}, {Stage::memory, 1}};
    for (const auto& [stage, rpn] : tiers) {
        for (const auto& c : kCases) {
            const std::string what = describe(c, stage, rpn);
            Loader loader(comm, src, options_of(c, stage, rpn));
            EXPECT_EQ(loader.stats().tier, stage == Stage::memory ? "memory" : "file") << what;
            for (std::uint64_t e = 0; e < 2; ++e) {
                const Yield y = consume(loader, e, slot_ok);
                expect_exactly_once(loader, y, n, c.remainder != Remainder::drop,
                                    what + " epoch " + std::to_string(e));
            }
        }
    }
    comm.free();
}

}  // namespace

// Raw records (one ragged uint8 field, zero-length records included): values + offsets staged.
TEST(MemoryTier, RaggedTfRecordPayloadsExactlyOnceWithGeneratorBytes) {
    h5t::TempDir dir;
    constexpr std::uint64_t n = 203;
    write_records(dir.file("raw.tfrecord"), n, payload);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("raw.tfrecord")});
    ASSERT_EQ(src.num_samples(), n);
    sweep(src, n, [](const HostBatch& b, std::size_t s) {
        return ragged_is_payload(b.fields()[0], s, static_cast<std::uint64_t>(b.index()[s]));
    });
    src.close();
    comm.free();
}

// tf.train.Example decoded once at staging: a fixed bytes field, an int64 and a ragged bytes
// field, each equal to what the generator put in the record.
TEST(MemoryTier, DecodedExampleFieldsExactlyOnceWithGeneratorValues) {
    h5t::TempDir dir;
    constexpr std::uint64_t n = 171;
    write_records(dir.file("ex.tfrecord"), n, example);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordOptions o;
    o.features = {parse_feature_spec("image:bytes/uint8:4"), parse_feature_spec("label:int64"),
                  parse_feature_spec("text:bytes")};
    TfRecordSource src(comm, {dir.file("ex.tfrecord")}, o);
    ASSERT_EQ(src.fields().size(), 3u);
    sweep(src, n, [](const HostBatch& b, std::size_t s) {
        const auto id = static_cast<std::uint64_t>(b.index()[s]);
        std::int64_t label = 0;
        std::memcpy(&label, b.fields()[1].data + s * 8, 8);
        return std::memcmp(b.fields()[0].data + s * 4, image_of(id).data(), 4) == 0 &&
               label == static_cast<std::int64_t>(id) * 1000 - 5 &&
               ragged_is_payload(b.fields()[2], s, id);
    });
    src.close();
    comm.free();
}

// Over budget: `memory` is the same ConfigError on every rank naming the budget; `auto` serves
// from the file and says why; within budget `auto` stages.
TEST(MemoryTier, BudgetDecidesAutoAndRefusesMemory) {
    h5t::TempDir dir;
    constexpr std::uint64_t n = 97;
    write_records(dir.file("b.tfrecord"), n, payload);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("b.tfrecord")});
    const Case c{8, Remainder::pad, Sharding::global, Shuffle::global, 2, 1};
    LoaderOptions tight = options_of(c, Stage::memory, 0);
    tight.tier.stage_budget_bytes = 64;  // less than the ring alone
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, tight), "stage budget", "64 bytes");
    tight.tier.stage = Stage::automatic;
    {
        Loader loader(comm, src, tight);
        EXPECT_EQ(loader.stats().tier, "file");
        EXPECT_NE(loader.stats().tier_note.find("serving from the file"), std::string::npos)
            << loader.stats().tier_note;
        EXPECT_EQ(loader.stats().staged_bytes, 0u);
        const Yield y = consume(loader, 0, [](const HostBatch&, std::size_t) { return true; });
        expect_exactly_once(loader, y, n, true, "auto over budget");
    }
    LoaderOptions roomy = options_of(c, Stage::automatic, 0);
    {
        Loader loader(comm, src, roomy);
        EXPECT_EQ(loader.stats().tier, "memory");
        // Every rank holds its values, offsets (8 B per record + 1) and alignment, no more.
        const std::uint64_t all = h5t::sum(loader.stats().staged_bytes);
        std::uint64_t payload_bytes = 0;
        for (std::uint64_t id = 0; id < n; ++id) payload_bytes += payload(id).size();
        EXPECT_GE(all, payload_bytes + 8 * (n + h5t::size()));
        EXPECT_LE(all, payload_bytes + 8 * (n + h5t::size()) + 128 * h5t::size());
    }
    src.close();
    comm.free();
}

// The stage options must match on every rank (one rank staging alone would hang the others).
TEST(MemoryTier, DifferingStageOptionsAreTheSameConfigError) {
    h5t::TempDir dir;
    write_records(dir.file("d.tfrecord"), 40, payload);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("d.tfrecord")});
    if (h5t::size() > 1) {  // same condition on every rank
        LoaderOptions o = options_of(kCases[0], h5t::rank() == 1 ? Stage::memory : Stage::none, 0);
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, o), "stage", "memory", "none");
    }
    LoaderOptions bad = options_of(kCases[0], Stage::memory, -2);
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, bad), "stage_ranks_per_node");
    src.close();
    comm.free();
}
