// One state contract for both kinds of loader (issue 38, acceptance 3): `state()` is local on a
// file `Loader` and on a `Stream`, so the trainer's usual save, "rank 0 asks for the state
// and writes it while the other ranks go on", neither hangs nor differs between ranks. The ranks
// go on past the save (the job is killed later); a loader made from rank 0's state yields
// exactly the samples not consumed before the save.
#include <string>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

constexpr int kBeforeSave = 3;  // steps consumed before rank 0 saves
constexpr int kAfterSave = 3;   // steps the job still makes before it is killed

/// Rank 0's saved text, as a job script would hand it to the next run (a file read by every rank).
std::string shared_save(const Communicator& comm, const std::string& on_rank0) {
    return comm.broadcast(on_rank0, 0);
}

void collect(const HostBatch& b, std::vector<std::int64_t>& ids) {
    for (std::size_t j = 0; j < b.size(); ++j) {
        if (b.valid()[j]) ids.push_back(b.index()[j]);
    }
}

TEST(StateOnOneRank, StreamLoaderSavedByRankZeroAloneResumesExactlyOnce) {
    Communicator comm(MPI_COMM_WORLD);
    const std::vector<std::uint64_t> lengths{97, 40, 0, 123, 61};
    const auto source = make_source(lengths);
    for (auto sharding : {StreamSharding::chunk, StreamSharding::hash, StreamSharding::source}) {
        for (std::uint64_t window : {1, 4}) {
            LoaderOptions o;
            o.stream.sharding = sharding;
            o.plan.batch_size = o.plan.budget.max_batch_samples = 5;
            o.stream.chunk_size = 3;
            o.stream.window_steps = window;
            // A collective state() would meet the other ranks' next step: the watchdog ends it.
            o.safety.timeout = std::chrono::seconds(30);
            const std::string what = "sharding " + std::to_string(static_cast<int>(sharding)) +
                                     ", window_steps " + std::to_string(window);
            std::vector<std::int64_t> before;
            std::string mine;
            {
                Stream loader(comm, source, o);
                HostBatch b;
                for (int k = 0; k < kBeforeSave && loader.next(b); ++k) collect(b, before);
                if (comm.rank() == 0) mine = loader.state().to_json();
                for (int k = 0; k < kAfterSave && loader.next(b); ++k) {
                }
            }
            const std::string saved = shared_save(comm, mine);
            const LoaderState state = LoaderState::from_json(saved, "test");
            EXPECT_EQ(state.steps_consumed, static_cast<std::uint64_t>(kBeforeSave)) << what;
            EXPECT_EQ(state.samples_consumed, all_ids(before).size()) << what;
            // Every rank computes the same state at the same step (no rank needs the others).
            {
                Stream again(comm, source, o);
                HostBatch b;
                for (int k = 0; k < kBeforeSave && again.next(b); ++k) {
                }
                const auto h = min_max(fnv1a64(again.state().to_json()));
                EXPECT_EQ(h.first, h.second) << what << ": state differs between ranks";
                EXPECT_EQ(again.state().to_json(), saved) << what;
            }
            Stream resumed(comm, source, o, &state);
            Seen after = consume(resumed);
            after.ids.insert(after.ids.end(), before.begin(), before.end());
            expect_exactly_once(after, expected_ids(lengths), what);
        }
    }
}

TEST(StateOnOneRank, FileLoaderSavedByRankZeroAloneResumesExactlyOnce) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = h5t::shared_files().generated_contiguous;
    LoaderOptions o;
    o.plan.batch_size = 3;
    o.plan.sharding = Sharding::global;
    o.plan.shuffle = Shuffle::global;
    o.plan.remainder = Remainder::mask;
    o.plan.seed = 7;
    o.pipeline.prefetch = 3;
    o.pipeline.io_threads = 1;
    o.delivery.pin_memory = false;
    o.safety.timeout = std::chrono::seconds(30);
    std::vector<std::int64_t> before;
    std::string mine;
    {
        Hdf5Source src(comm, path);
        Loader loader(comm, src, o);
        EpochRange range = loader.epoch(0);
        HostBatch b;
        for (int k = 0; k < kBeforeSave && range.next(b); ++k) collect(b, before);
        if (comm.rank() == 0) mine = loader.state().to_json();
        for (int k = 0; k < kAfterSave && range.next(b); ++k) {
        }
        src.close();
    }
    const LoaderState state = LoaderState::from_json(shared_save(comm, mine), "rank 0's save");
    std::vector<std::int64_t> after;
    {
        Hdf5Source src(comm, path);
        Loader resumed = Loader::restore(comm, src, o, state);
        for (const HostBatch& b : resumed.epoch(0)) collect(b, after);
        src.close();
    }
    auto all = h5t::allgatherv(after);
    const auto first = h5t::allgatherv(before);
    all.insert(all.end(), first.begin(), first.end());
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> want(h5t::kGeneratedRows);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int64_t>(i);
    EXPECT_EQ(all, want) << "every sample exactly once, saved by rank 0 alone";
    comm.free();
}

}  // namespace
