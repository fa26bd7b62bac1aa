// Stream loader: an exception in one rank's stream becomes the same error on every rank; byte
// and token budgets with heavy-tailed sizes keep every batch within budget (or one flagged
// oversize sample) with equal steps and every item exactly once.
#include <random>

#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

TEST(StreamErrors, OneStreamThrowsEveryRankEndsWithTheSameError) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    std::mt19937_64 rng(42);  // same sequence on every rank
    for (int trial = 0; trial < 6; ++trial) {
        const std::size_t streams = static_cast<std::size_t>(w) + 1;
        std::vector<std::uint64_t> lengths(streams);
        for (auto& l : lengths) l = 20 + rng() % 80;
        const auto bad = static_cast<std::int64_t>(rng() % streams);
        const std::uint64_t at = rng() % lengths[static_cast<std::size_t>(bad)];
        const auto source = make_source(lengths, bad, at);
        LoaderOptions o;
        // source; hash reading by sources (forwarded); hash reading keys (every rank reads).
        o.stream.sharding = trial % 3 == 0 ? StreamSharding::source : StreamSharding::hash;
        o.stream.hash_reading = trial % 3 == 2 ? HashReading::keys : HashReading::sources;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 1 + rng() % 5;
        o.safety.timeout = std::chrono::seconds(20);  // a hang ends with the watchdog's report
        Stream loader(comm, source, o);
        std::string first, second;
        HostBatch b;
        try {
            while (loader.next(b)) {
            }
        } catch (const IoError& e) {
            first = e.what();
        }
        try {
            loader.next(b);
        } catch (const IoError& e) {
            second = e.what();
        }
        const std::string expect_text =
            "camera " + std::to_string(bad) + " lost at frame " + std::to_string(at);
        EXPECT_NE(first.find(expect_text), std::string::npos) << first;
        EXPECT_EQ(first, second) << "a later call must throw the same error";
        // Identical text on every rank (compare hashes).
        const auto h = min_max(fnv1a64(first));
        EXPECT_EQ(h.first, h.second) << "ranks ended with different errors: " << first;
    }
}

// A budget that differs on one rank is a ConfigError on every rank naming the option field and
// both values (it used to name only "stream options" with the whole option text).
TEST(StreamErrors, OptionThatDiffersOnOneRankIsNamed) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    const auto source = make_source({10, 20});
    LoaderOptions o;
    o.plan.budget.batch_bytes = comm.rank() == w - 1 ? 4096 : 2048;
    std::string msg;
    try {
        Stream loader(comm, source, o);
    } catch (const ConfigError& e) {
        msg = e.what();
    }
    if (w == 1) {
        EXPECT_EQ(msg, "");
    } else {
        EXPECT_NE(
            msg.find(
                "LoaderOptions::plan.budget.batch_bytes is '2048' on rank 0 but '4096' on rank " +
                std::to_string(w - 1)),
            std::string::npos)
            << msg;
        EXPECT_EQ(msg.find("batch_size"), std::string::npos) << "names equal options: " << msg;
    }
    const auto h = min_max(fnv1a64(msg));
    EXPECT_EQ(h.first, h.second) << "ranks ended with different errors: " << msg;
}

TEST(StreamBudgets, ByteBudgetHeavyTailed) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 8; ++trial) {
        std::vector<std::uint64_t> lengths(static_cast<std::size_t>(w) + 2);
        for (auto& l : lengths) l = rng() % 4 == 0 ? 0 : rng() % 300;
        const auto source = make_source(lengths);
        LoaderOptions o;
        o.stream.sharding = static_cast<StreamSharding>(trial % 3);
        o.stream.remainder = trial % 2 ? StreamRemainder::mask : StreamRemainder::rebalance;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 1000;
        o.plan.budget.batch_bytes =
            500 + rng() % 3000;  // large samples (1000-10000 bytes) are oversize
        o.stream.chunk_size = 1 + rng() % 16;
        if (trial >= 4) o.stream.length_buckets = {16, 64, 1000};
        Stream loader(comm, source, o);
        const Seen seen = consume(loader);
        expect_exactly_once(seen, expected_ids(lengths), "bytes trial " + std::to_string(trial));
        EXPECT_GT(min_max(loader.stats().oversize_batches).second +
                      (expected_ids(lengths).empty() ? 1 : 0),
                  0u)
            << "heavy tail: some samples exceed the budget";
    }
}

TEST(StreamBudgets, TokenBudgetWithBuckets) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    std::mt19937_64 rng(11);
    for (int trial = 0; trial < 6; ++trial) {
        std::vector<std::uint64_t> lengths(static_cast<std::size_t>(w));
        for (auto& l : lengths) l = rng() % 400;
        lengths[0] = 0;
        const auto source = make_source(lengths);
        LoaderOptions o;
        o.stream.sharding = static_cast<StreamSharding>(trial % 3);
        o.stream.remainder = trial % 2 ? StreamRemainder::mask : StreamRemainder::rebalance;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 64;
        o.plan.budget.batch_tokens = 256 + rng() % 1024;
        o.plan.budget.token_field = 1;
        if (trial >= 3) o.stream.length_buckets = {8, 32, 100};
        Stream loader(comm, source, o);
        const Seen seen = consume(loader);
        expect_exactly_once(seen, expected_ids(lengths), "tokens trial " + std::to_string(trial));
        const auto& st = loader.stats();
        EXPECT_LE(st.stream.padding_tokens, st.batches * o.plan.budget.batch_tokens);
    }
}

TEST(StreamBudgets, BucketsReducePaddingWaste) {
    // Not collective-dependent: each rank compares its own padding with and without buckets.
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths{3000};
    const auto source = make_source(lengths);
    std::uint64_t padding[2] = {0, 0};
    for (int with = 0; with < 2; ++with) {
        LoaderOptions o;
        o.stream.sharding = StreamSharding::chunk;
        o.stream.chunk_size = 500;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 64;
        o.plan.budget.batch_tokens = 2000;
        o.plan.budget.token_field = 1;
        if (with) o.stream.length_buckets = {10, 20, 40, 60, 80, 100};
        Stream loader(comm, source, o);
        const Seen seen = consume(loader);
        expect_exactly_once(seen, expected_ids(lengths), with ? "buckets" : "no buckets");
        padding[with] = loader.stats().stream.padding_tokens;
    }
    EXPECT_LT(padding[1], padding[0]);
}

}  // namespace
