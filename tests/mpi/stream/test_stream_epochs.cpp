// Epochs of the one Loader over streams, with the file loader's contract: each epoch is one pass
// over every stream (every item exactly once per epoch, equal steps); `epoch(e)` is always a
// whole pass except the first call of a restored loader with the state's epoch, which yields the
// rest of the saved pass; `EpochOptions::max_steps` and `request_stop()` end a pass at the same
// step on every rank, where `state()` stands.
#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

LoaderOptions options(StreamSharding sharding) {
    LoaderOptions o;
    o.stream.sharding = sharding;
    o.plan.batch_size = 5;
    o.stream.chunk_size = 4;
    o.safety.timeout = std::chrono::seconds(60);
    return o;
}

// Consumes one epoch through the range-for, checking every batch.
Seen consume_epoch(Loader& loader, std::uint64_t e) {
    Seen seen;
    auto range = loader.epoch(e);
    for (auto& batch : range) {
        ++seen.batches;
        check_batch(batch, loader.options(), range.last_oversize(), seen);
    }
    EXPECT_EQ(range.steps_done(), seen.batches);
    return seen;
}

Seen joined(Seen a, const Seen& b) {
    a.ids.insert(a.ids.end(), b.ids.begin(), b.ids.end());
    a.batches += b.batches;
    a.bad_content += b.bad_content;
    a.bad_mask += b.bad_mask;
    a.over_budget += b.over_budget;
    return a;
}

TEST(StreamEpochs, EveryEpochIsAFullPass) {
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths = {37, 0, 120, 9};
    const auto source = make_source(lengths);
    const auto expected = expected_ids(lengths);
    for (auto sharding : {StreamSharding::chunk, StreamSharding::hash, StreamSharding::source}) {
        Loader loader(comm, source, options(sharding));
        EXPECT_EQ(loader.input(), LoaderInput::stream);
        for (std::uint64_t e : {0, 1, 2}) {
            const Seen seen = consume_epoch(loader, e);
            expect_exactly_once(seen, expected, "epoch " + std::to_string(e));
            // A pass consumed to its end: the state points at the start of the next epoch.
            const LoaderState st = loader.state();
            EXPECT_EQ(st.epoch, e + 1);
            EXPECT_EQ(st.steps_consumed, 0u);
            EXPECT_EQ(st.input, LoaderInput::stream);
        }
    }
}

TEST(StreamEpochs, MaxStepsEndsThePassWhereStateStandsAndRestoreContinuesIt) {
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths = {200, 31};
    const auto source = make_source(lengths);
    const auto expected = expected_ids(lengths);
    const LoaderOptions o = options(StreamSharding::chunk);
    Loader loader(comm, source, o);
    Seen first;
    {
        auto range = loader.epoch(4, EpochOptions{3});
        EXPECT_EQ(range.steps(), 3u);
        first = consume_range(range, o);
        EXPECT_EQ(first.batches, 3u);
    }
    const LoaderState state = loader.state();
    EXPECT_EQ(state.epoch, 4u);
    EXPECT_EQ(state.steps_consumed, 3u);
    // epoch(4) again is a whole pass, as for files.
    expect_exactly_once(consume_epoch(loader, 4), expected, "epoch 4 asked again");

    // A new loader restored from the state: the rest of pass 4, then whole passes.
    Loader b = Loader::restore(comm, source, o, state);
    const Seen rest = consume_epoch(b, 4);
    expect_exactly_once(joined(first, rest), expected, "epoch 4 stopped and restored");
    expect_exactly_once(consume_epoch(b, 5), expected, "epoch 5 after the restored one");

    // A restored loader whose first epoch is another number starts that pass whole.
    Loader c = Loader::restore(comm, source, o, state);
    expect_exactly_once(consume_epoch(c, 9), expected, "epoch 9 of a loader restored in 4");
}

TEST(StreamEpochs, RequestStopOnOneRankEndsThePassAtTheSameStepEverywhere) {
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths = {300, 77, 5};
    const auto source = make_source(lengths);
    const auto expected = expected_ids(lengths);
    for (auto sharding : {StreamSharding::chunk, StreamSharding::hash, StreamSharding::source}) {
        LoaderOptions o = options(sharding);
        o.stream.window_steps = 3;
        Loader loader(comm, source, o);
        auto range = loader.epoch(2);
        Seen before;
        HostBatch b;
        while (range.next(b)) {
            ++before.batches;
            check_batch(b, o, range.last_oversize(), before);
            // Rank 0 alone asks at its step 4; the others run on until the agreed stop.
            if (comm.rank() == 0 && before.batches == 4) range.request_stop();
        }
        EXPECT_TRUE(range.stopped());
        const auto steps = min_max(before.batches);
        EXPECT_EQ(steps.first, steps.second) << "ranks stopped at different steps";
        // Agreed at the next window: within window_steps steps of the request.
        EXPECT_GE(before.batches, 4u);
        EXPECT_LE(before.batches, 4u + o.stream.window_steps);
        const LoaderState state = loader.state();
        EXPECT_EQ(state.epoch, 2u);
        EXPECT_EQ(state.steps_consumed, before.batches);
        Loader resumed = Loader::restore(comm, source, o, state);
        const Seen rest = consume_epoch(resumed, 2);
        expect_exactly_once(joined(before, rest), expected, "stopped at step 4 and restored");
    }
}

TEST(StreamEpochs, FileOnlyOptionsAreRefusedByName) {
    Communicator comm(MPI_COMM_WORLD);
    const auto source = make_source({10, 10});
    const auto refusal = [&](LoaderOptions o) {
        try {
            Loader loader(comm, source, std::move(o));
        } catch (const ConfigError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    LoaderOptions shuffled = options(StreamSharding::chunk);
    shuffled.plan.shuffle = Shuffle::local;
    EXPECT_NE(refusal(shuffled).find("plan.shuffle"), std::string::npos) << refusal(shuffled);
    LoaderOptions staged = options(StreamSharding::chunk);
    staged.tier.stage = Stage::memory;
    EXPECT_NE(refusal(staged).find("stage"), std::string::npos);
    LoaderOptions cuda = options(StreamSharding::chunk);
    cuda.delivery.device = "cuda";
    EXPECT_NE(refusal(cuda).find("device"), std::string::npos);
    LoaderOptions seeded = options(StreamSharding::chunk);
    seeded.plan.seed = 7;
    EXPECT_NE(refusal(seeded).find("plan.seed"), std::string::npos);
    // A file state is refused by a stream loader, by name.
    LoaderState file_state;
    file_state.num_samples = 10;
    std::string message;
    try {
        Loader::restore(comm, source, options(StreamSharding::chunk), file_state);
    } catch (const ConfigError& e) {
        message = e.what();
    }
    EXPECT_NE(message.find("loader over files"), std::string::npos) << message;
}

}  // namespace
