// Stream loader under every sharding policy and remainder: streams of random lengths (zeros
// included, one stream holding everything, all empty), 1-4 ranks: every item exactly once,
// equal steps, no hang (ctest timeout), and with `rebalance` the fewest steps possible.
#include <random>

#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

struct Policy {
    StreamSharding sharding;
    HashReading reading;
    const char* name;
};

const Policy kPolicies[] = {
    {StreamSharding::chunk, HashReading::chunks, "chunk"},
    {StreamSharding::hash, HashReading::chunks, "hash(chunks)"},
    {StreamSharding::hash, HashReading::sources, "hash(sources)"},
    {StreamSharding::hash, HashReading::keys, "hash(keys)"},
    {StreamSharding::hash, HashReading::automatic, "hash(auto)"},
    {StreamSharding::source, HashReading::chunks, "source"},
};

/// Length patterns over `n` streams (the same on every rank).
std::vector<std::vector<std::uint64_t>> patterns(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::uint64_t> random(n), everything(n, 0), none(n, 0), tiny(n, 0);
    for (auto& l : random) l = rng() % 3 == 0 ? 0 : rng() % 120;
    everything[n - 1] = 257;
    tiny[0] = 1;
    return {random, everything, none, tiny};
}

TEST(StreamPolicies, EveryItemExactlyOnceWithEqualSteps) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    for (std::size_t streams : {std::size_t(1), static_cast<std::size_t>(w), std::size_t(5)}) {
        for (const auto& lengths : patterns(streams, 1000 + streams)) {
            const auto source = make_source(lengths);
            const auto expected = expected_ids(lengths);
            for (const auto& policy : kPolicies) {
                for (auto rem : {StreamRemainder::rebalance, StreamRemainder::mask}) {
                    for (std::uint64_t b : {1, 3, 8}) {
                        LoaderOptions o;
                        o.stream.sharding = policy.sharding;
                        o.stream.hash_reading = policy.reading;
                        o.stream.remainder = rem;
                        o.plan.batch_size = o.plan.budget.max_batch_samples = b;
                        o.stream.chunk_size = 4;
                        o.safety.timeout = std::chrono::seconds(60);
                        Stream loader(comm, source, o);
                        const Seen seen = consume(loader);
                        const std::string what =
                            std::string(policy.name) + " " +
                            (rem == StreamRemainder::mask ? "mask" : "rebalance") +
                            " B=" + std::to_string(b) + " streams=" + std::to_string(streams) +
                            " N=" + std::to_string(expected.size());
                        expect_exactly_once(seen, expected, what);
                        const std::uint64_t per_step = b * static_cast<std::uint64_t>(w);
                        const std::uint64_t fewest = (expected.size() + per_step - 1) / per_step;
                        if (rem == StreamRemainder::rebalance) {
                            EXPECT_EQ(seen.batches, fewest) << what;
                        } else {
                            EXPECT_GE(seen.batches, fewest) << what;
                        }
                        HostBatch after;
                        EXPECT_FALSE(loader.next(after)) << what << ": yields after the end";
                    }
                }
            }
        }
    }
}

// BUGS.md S4 (pytorch#33148): W=2 with shards of 3 and 2 batches: equal counts on both ranks.
// Streams: rank 0's stream holds 3 batches, rank 1's 2 (source sharding, one stream per rank).
TEST(StreamPolicies, BugS4UnequalShardsGiveEqualSteps) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    std::vector<std::uint64_t> lengths(static_cast<std::size_t>(w), 2 * 4);
    lengths[0] = 3 * 4;
    const auto source = make_source(lengths);
    for (auto rem : {StreamRemainder::rebalance, StreamRemainder::mask}) {
        LoaderOptions o;
        o.stream.sharding = StreamSharding::source;
        o.stream.remainder = rem;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 4;
        Stream loader(comm, source, o);
        const Seen seen = consume(loader);
        expect_exactly_once(seen, expected_ids(lengths), "S4");
        if (rem == StreamRemainder::mask) EXPECT_EQ(seen.batches, 3u);  // the longest stream
    }
}

// BUGS.md S5 (huggingface/datasets#6623): records 1..5, W=2, B=2: 2 batches on both ranks
// (last one masked); never a rank without a step.
TEST(StreamPolicies, BugS5FiveRecordsTwoRanksBatchTwo) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths{5};
    const auto source = make_source(lengths);
    LoaderOptions o;
    o.stream.sharding = StreamSharding::chunk;
    o.stream.chunk_size = 2;
    o.plan.batch_size = o.plan.budget.max_batch_samples = 2;
    o.stream.remainder = StreamRemainder::mask;
    Stream loader(comm, source, o);
    const Seen seen = consume(loader);
    expect_exactly_once(seen, expected_ids(lengths), "S5");
    const std::uint64_t expected_steps[] = {3, 2, 1, 1};  // ceil(ceil(5/2 chunks)/W) per rank
    EXPECT_EQ(seen.batches, expected_steps[std::min(w, 4) - 1]);
}

// BUGS.md S10 (litData#233, webdataset#188): fewer sources than ranks (1 stream, W ranks);
// 100 items: every rank gets its share (rebalance), equal counts.
TEST(StreamPolicies, BugS10FewerSourcesThanRanks) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths{100};
    const auto source = make_source(lengths);
    LoaderOptions o;
    o.stream.sharding = StreamSharding::source;
    o.plan.batch_size = o.plan.budget.max_batch_samples = 5;
    Stream loader(comm, source, o);
    const Seen seen = consume(loader);
    expect_exactly_once(seen, expected_ids(lengths), "S10");
    const std::uint64_t per_step = 5 * static_cast<std::uint64_t>(w);
    EXPECT_EQ(seen.batches, (100 + per_step - 1) / per_step);
    const auto share = min_max(seen.ids.size());
    EXPECT_GT(share.first, 0u) << "a rank without a source got no items";
}

}  // namespace
