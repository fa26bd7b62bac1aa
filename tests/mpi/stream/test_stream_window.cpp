// Stream loader windows (LoaderOptions::window_steps): ranks that each hold full batches for
// the next steps agree once for all of them; the batches, exactly once, the step count and the
// step at which a read error is thrown are the same as with an agreement at every step.
#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

std::string name(StreamSharding s) {
    return s == StreamSharding::chunk ? "chunk" : s == StreamSharding::source ? "source" : "hash";
}

LoaderOptions options(StreamSharding sharding, std::uint64_t window) {
    LoaderOptions o;
    o.stream.sharding = sharding;
    o.plan.batch_size = o.plan.budget.max_batch_samples = 8;
    o.stream.chunk_size = 16;
    o.stream.window_steps = window;
    o.safety.timeout = std::chrono::seconds(60);
    return o;
}

TEST(StreamWindow, OneAgreementPerWindowSameItemsAndSteps) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    // One long stream (chunk) and one stream per rank plus a short one (source).
    const std::vector<std::uint64_t> one{3001};
    std::vector<std::uint64_t> many(static_cast<std::size_t>(w), 1500);
    many.push_back(37);
    for (auto sharding : {StreamSharding::chunk, StreamSharding::source, StreamSharding::hash}) {
        const auto& lengths = sharding == StreamSharding::source ? many : one;
        const auto source = make_source(lengths);
        std::uint64_t steps_each[2] = {0, 0};
        std::uint64_t agreements[2] = {0, 0};
        int k = 0;
        for (std::uint64_t window : {1, 16}) {
            Stream loader(comm, source, options(sharding, window));
            const Seen seen = consume(loader);
            const std::string what = name(sharding) + " window " + std::to_string(window);
            expect_exactly_once(seen, expected_ids(lengths), what);
            steps_each[k] = seen.batches;
            agreements[k] = min_max(loader.stats().stream.agreements).second;
            ++k;
        }
        EXPECT_EQ(steps_each[0], steps_each[1]) << "the window changed the number of steps";
        // Every step agrees at window 1 (the last call, which finds every rank dry, too).
        EXPECT_GE(agreements[0], steps_each[0]);
        // At window 16 one agreement covers up to 16 steps; the tail (ranks running dry,
        // rebalancing) agrees step by step, a few windows' worth at most.
        EXPECT_LE(agreements[1], steps_each[1] / 16 + 40)
            << agreements[1] << " agreements for " << steps_each[1] << " steps";
        EXPECT_LT(agreements[1] * 4, agreements[0]);
    }
}

TEST(StreamWindow, ByteLimitKeepsTheQueueToOneBatch) {
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths{800};
    const auto source = make_source(lengths);
    LoaderOptions o = options(StreamSharding::chunk, 16);
    o.stream.window_bytes = 1;  // a full batch is still read; nothing beyond it
    Stream loader(comm, source, o);
    const Seen seen = consume(loader);
    expect_exactly_once(seen, expected_ids(lengths), "window_bytes 1");
    EXPECT_GE(loader.stats().stream.agreements, seen.batches);
}

// A read error found while reading ahead is thrown at the step that needs the row, on every
// rank, with the same text as without a window (under hash: within a window of that step).
TEST(StreamWindow, ReadErrorAtTheSameStepAsWithoutWindow) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    for (auto sharding : {StreamSharding::chunk, StreamSharding::source, StreamSharding::hash}) {
        for (std::uint64_t at : {0u, 5u, 203u, 777u}) {
            std::vector<std::uint64_t> lengths(static_cast<std::size_t>(w), 900);
            const auto source = make_source(lengths, 0, at);
            std::uint64_t steps[2] = {0, 0};
            std::string error[2];
            int k = 0;
            for (std::uint64_t window : {1, 16}) {
                Stream loader(comm, source, options(sharding, window));
                HostBatch b;
                try {
                    while (loader.next(b)) ++steps[k];
                } catch (const IoError& e) {
                    error[k] = e.what();
                }
                ++k;
            }
            const std::string what = name(sharding) + " error at " + std::to_string(at);
            EXPECT_NE(error[1].find("camera 0 lost at frame " + std::to_string(at)),
                      std::string::npos)
                << what << ": " << error[1];
            if (sharding == StreamSharding::hash) {
                // Rows read ahead are routed away at once, so no step "needs" a row on its
                // reader: the error is thrown at the next agreement, within one window of the
                // step without a window, and the frame is named (which ranks met it may differ:
                // reading by chunks, a rank skipping ahead over the frame meets it too).
                EXPECT_NE(error[0].find("camera 0 lost at frame " + std::to_string(at)),
                          std::string::npos)
                    << what << ": " << error[0];
                const std::uint64_t apart =
                    steps[0] > steps[1] ? steps[0] - steps[1] : steps[1] - steps[0];
                EXPECT_LE(apart, 16u) << what << ": " << steps[0] << " against " << steps[1];
            } else {
                EXPECT_EQ(error[0], error[1]) << what;
                EXPECT_EQ(steps[0], steps[1]) << what << ": the window moved the error's step";
            }
            const auto h = min_max(fnv1a64(error[1]));
            EXPECT_EQ(h.first, h.second) << what << ": ranks ended with different errors";
        }
    }
}

}  // namespace
