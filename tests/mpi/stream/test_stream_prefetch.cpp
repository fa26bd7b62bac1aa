// Streams read ahead by I/O threads (LoaderOptions::io_threads, prefetch; issue 38): the batches
// are those of reading on the caller's thread, step for step and slot for slot, whatever the
// sharding, remainder, budget, window and thread count; a read error surfaces at the same step
// with the same text on every rank; a new pass restarts the threads. What it buys (the reading
// cost paid while the trainer computes) is measured in benchmarks/stream_prefetch.sh, not here.
#include <random>

#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

/// The ids of every slot of every batch, steps in order (padding −1 included).
std::vector<std::int64_t> slots_of(Loader& loader, std::uint64_t epoch, Seen& seen) {
    std::vector<std::int64_t> out;
    auto range = loader.epoch(epoch);
    for (const HostBatch& b : range) {
        ++seen.batches;
        check_batch(b, loader.options(), range.last_oversize(), seen);
        out.push_back(-2);  // step separator
        out.insert(out.end(), b.index(), b.index() + b.size());
    }
    return out;
}

TEST(StreamPrefetch, ThreadsYieldTheBatchesOfTheCallersThread) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    std::mt19937_64 rng(11);  // the same cases on every rank
    for (int trial = 0; trial < 12; ++trial) {
        std::vector<std::uint64_t> lengths(static_cast<std::size_t>(w) + 2);
        for (auto& l : lengths) l = rng() % 150;
        const auto source = make_source(lengths);
        LoaderOptions o;
        o.pipeline.io_threads = 0;  // the caller's thread: the reference
        o.stream.sharding = static_cast<StreamSharding>(trial % 3);
        o.stream.remainder = trial % 2 ? StreamRemainder::mask : StreamRemainder::rebalance;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 1 + rng() % 9;
        o.stream.chunk_size = 1 + rng() % 7;
        o.stream.window_steps = 1 + rng() % 4;
        if (trial % 4 == 3) {
            o.plan.budget.batch_bytes = 3000;
            o.plan.batch_size = o.plan.budget.max_batch_samples = 50;
        }
        const std::string what = "trial " + std::to_string(trial) + ": " + o.stream.describe() +
                                 " batch " + std::to_string(max_batch(o)) + " bytes " +
                                 std::to_string(o.plan.budget.batch_bytes);
        Seen inline_seen;
        std::vector<std::int64_t> want;
        {
            Loader loader(comm, source, o);
            want = slots_of(loader, 0, inline_seen);
            EXPECT_EQ(loader.stats().stream.io_threads, 0u);
        }
        expect_exactly_once(inline_seen, expected_ids(lengths), what + " (caller's thread)");
        for (std::size_t threads : {1, 3}) {
            LoaderOptions t = o;
            t.pipeline.io_threads = threads;
            t.pipeline.prefetch = 1 + rng() % 4;
            Loader loader(comm, source, t);
            Seen seen;
            EXPECT_EQ(slots_of(loader, 0, seen), want) << what << ", " << threads << " threads";
            EXPECT_GE(loader.stats().stream.io_threads, 1u);
            // A second pass restarts the threads and yields the first pass's batches again.
            Seen again;
            EXPECT_EQ(slots_of(loader, 1, again), want) << what << ", second pass";
            expect_exactly_once(seen, expected_ids(lengths), what + ", threads");
        }
    }
}

TEST(StreamPrefetch, ReadErrorAtTheSameStepOnEveryRank) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 6; ++trial) {
        std::vector<std::uint64_t> lengths(static_cast<std::size_t>(w) + 1);
        for (auto& l : lengths) l = 20 + rng() % 80;
        const auto bad = static_cast<std::int64_t>(rng() % lengths.size());
        const std::uint64_t at = rng() % lengths[static_cast<std::size_t>(bad)];
        const auto source = make_source(lengths, bad, at);
        LoaderOptions o;
        o.stream.sharding = static_cast<StreamSharding>(trial % 3);
        o.plan.batch_size = o.plan.budget.max_batch_samples = 1 + rng() % 5;
        o.safety.timeout = std::chrono::seconds(20);
        auto run = [&](std::size_t threads) {
            LoaderOptions t = o;
            t.pipeline.io_threads = threads;
            Stream loader(comm, source, t);
            HostBatch b;
            std::uint64_t steps = 0;
            std::string error;
            try {
                while (loader.next(b)) ++steps;
            } catch (const IoError& e) {
                error = e.what();
            }
            return std::make_pair(steps, error);
        };
        const auto inline_run = run(0);
        const auto threaded = run(2);
        EXPECT_EQ(threaded, inline_run) << "trial " << trial;
        EXPECT_NE(threaded.second.find("camera " + std::to_string(bad) + " lost at frame " +
                                       std::to_string(at)),
                  std::string::npos)
            << threaded.second;
        const auto h = min_max(fnv1a64(threaded.second));
        EXPECT_EQ(h.first, h.second) << "ranks ended with different errors";
    }
}

}  // namespace
