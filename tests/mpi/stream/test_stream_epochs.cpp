// StreamLoader::epoch(e): the range-for iteration a `Loader` has. Each epoch is one pass over
// every stream (every item exactly once per epoch, equal steps); the same number continues the
// pass; a resumed loader's first epoch is the rest of the saved pass.
#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

// Consumes one epoch through the range-for, checking every batch.
Seen consume_epoch(StreamLoader& loader, std::uint64_t e, std::uint64_t max_steps = 0) {
    Seen seen;
    for (auto& batch : loader.epoch(e)) {
        ++seen.batches;
        check_batch(batch, loader, seen);
        if (max_steps > 0 && seen.batches == max_steps) break;
    }
    return seen;
}

StreamOptions options(StreamSharding sharding) {
    StreamOptions o;
    o.sharding = sharding;
    o.batch_size = 5;
    o.chunk_size = 4;
    o.timeout = std::chrono::seconds(60);
    return o;
}

TEST(StreamEpochs, EveryEpochIsAFullPass) {
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths = {37, 0, 120, 9};
    const auto source = make_source(lengths);
    const auto expected = expected_ids(lengths);
    for (auto sharding : {StreamSharding::chunk, StreamSharding::hash, StreamSharding::source}) {
        StreamLoader loader(comm, source, options(sharding));
        for (std::uint64_t e : {0, 1, 2}) {
            const Seen seen = consume_epoch(loader, e);
            EXPECT_EQ(loader.current_epoch(), e);
            expect_exactly_once(seen, expected, "epoch " + std::to_string(e));
            EXPECT_EQ(loader.steps(), seen.batches);
        }
    }
}

TEST(StreamEpochs, SameNumberContinuesThePassAndResumeContinuesIt) {
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths = {200, 31};
    const auto source = make_source(lengths);
    const auto expected = expected_ids(lengths);
    StreamLoader loader(comm, source, options(StreamSharding::chunk));
    Seen first = consume_epoch(loader, 4, 3);
    const Seen rest = consume_epoch(loader, 4);
    first.ids.insert(first.ids.end(), rest.ids.begin(), rest.ids.end());
    first.batches += rest.batches;
    expect_exactly_once(first, expected, "epoch 4 in two parts");

    // Stopped inside epoch 7, resumed by a new loader: the rest of the pass, then a full one.
    StreamLoader a(comm, source, options(StreamSharding::chunk));
    Seen before = consume_epoch(a, 7, 4);
    const StreamState state = a.state();
    StreamLoader b(comm, source, options(StreamSharding::chunk), &state);
    const Seen after = consume_epoch(b, 7);
    before.ids.insert(before.ids.end(), after.ids.begin(), after.ids.end());
    before.batches += after.batches;
    expect_exactly_once(before, expected, "epoch 7 stopped and resumed");
    expect_exactly_once(consume_epoch(b, 8), expected, "epoch 8 after the resumed one");
}

}  // namespace
