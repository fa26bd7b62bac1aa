// Stream state: saved after K steps (identical on every rank, JSON round trip), a new loader
// made from it yields exactly the items not yet yielded — with the same world size, and with
// fewer ranks (a sub-communicator).
#include <random>

#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

struct ResumeCase {
    StreamSharding sharding;
    StreamRemainder remainder;
    std::uint64_t batch_bytes;
    HashReading reading = HashReading::automatic;
};

TEST(StreamResume, StopAfterKStepsThenResumeDeliversTheRestExactlyOnce) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    std::mt19937_64 rng(5);
    const ResumeCase cases[] = {
        {StreamSharding::chunk, StreamRemainder::rebalance, 0},
        {StreamSharding::hash, StreamRemainder::rebalance, 0},
        {StreamSharding::source, StreamRemainder::rebalance, 0},
        {StreamSharding::chunk, StreamRemainder::mask, 2000},
        {StreamSharding::hash, StreamRemainder::mask, 0},
        {StreamSharding::source, StreamRemainder::mask, 3000},
        {StreamSharding::hash, StreamRemainder::rebalance, 0, HashReading::keys},
        {StreamSharding::hash, StreamRemainder::mask, 2500, HashReading::keys},
    };
    for (const auto& c : cases) {
        std::vector<std::uint64_t> lengths(static_cast<std::size_t>(w) + 1);
        for (auto& l : lengths) l = rng() % 200;
        const auto source = make_source(lengths);
        LoaderOptions o;
        o.stream.sharding = c.sharding;
        o.stream.hash_reading = c.reading;
        o.stream.remainder = c.remainder;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 1 + rng() % 7;
        o.plan.budget.batch_bytes = c.batch_bytes;
        if (c.batch_bytes) o.plan.batch_size = o.plan.budget.max_batch_samples = 100;
        o.stream.chunk_size = 1 + rng() % 9;
        const std::uint64_t k = rng() % 6;
        Seen before;
        std::string saved;
        {
            Stream loader(comm, source, o);
            // k = 0: saved before the first step (consume's 0 would take the whole pass).
            if (k > 0) before = consume(loader, k);
            const LoaderState st = loader.state();
            ASSERT_EQ(st.epoch, 0u) << "the pass ended within " << k << " steps";
            saved = st.to_json();
            EXPECT_EQ(st.steps_consumed, before.batches);
            EXPECT_EQ(st.samples_consumed, all_ids(before.ids).size());
        }
        const auto h = min_max(fnv1a64(saved));
        EXPECT_EQ(h.first, h.second) << "state differs between ranks";
        const LoaderState state = LoaderState::from_json(saved, "test");
        EXPECT_EQ(state.to_json(), saved);
        Stream resumed(comm, source, o, &state);
        Seen after = consume(resumed);
        EXPECT_EQ(resumed.steps(), before.batches + after.batches);
        after.ids.insert(after.ids.end(), before.ids.begin(), before.ids.end());
        after.batches += before.batches;
        expect_exactly_once(after, expected_ids(lengths), "resume after " + std::to_string(k));
    }
}

TEST(StreamResume, ResumeOnFewerRanks) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths{150, 0, 77, 31};
    const auto source = make_source(lengths);
    for (int policy = 0; policy < 4; ++policy) {
        const StreamSharding sharding = policy == 0   ? StreamSharding::chunk
                                        : policy == 3 ? StreamSharding::source
                                                      : StreamSharding::hash;
        LoaderOptions o;
        o.stream.sharding = sharding;
        // hash reading chunks (1) and keys (2): a state of one resumes with the other.
        o.stream.hash_reading = policy == 2 ? HashReading::keys : HashReading::chunks;
        o.plan.batch_size = o.plan.budget.max_batch_samples = 4;
        o.stream.chunk_size = 3;
        Seen before;
        LoaderState state;
        {
            Stream loader(comm, source, o);
            before = consume(loader, 3);
            state = loader.state();
        }
        // The last rank leaves; the others resume (all ranks when W = 1).
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        const bool stays = w == 1 || rank < w - 1;
        MPI_Comm sub = MPI_COMM_NULL;
        MPI_Comm_split(MPI_COMM_WORLD, stays ? 0 : MPI_UNDEFINED, rank, &sub);
        Seen after;
        if (stays) {
            Communicator small(sub);
            if (policy == 1) o.stream.hash_reading = HashReading::keys;
            if (policy == 2) o.stream.hash_reading = HashReading::chunks;
            Stream resumed(small, source, o, &state);
            after = consume(resumed);
            MPI_Comm_free(&sub);
        }
        after.ids.insert(after.ids.end(), before.ids.begin(), before.ids.end());
        auto all = all_ids(after.ids);
        std::sort(all.begin(), all.end());
        EXPECT_EQ(all, expected_ids(lengths));
        EXPECT_EQ(min_max(after.bad_content).second, 0u);
    }
}

}  // namespace
