// Loader::state / Loader::restore under MPI (issue "Fault recovery"): at the same world size
// the restored loader yields byte-identical batches to the uninterrupted run's remaining ones
// (HDF5, IDX and TFRecord with skipped records); at a smaller world size (a sub-communicator)
// it yields exactly the samples not yet consumed; incompatible states fail on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "../tfrecord_test_util.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/raw_source.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/framing.hpp"

namespace {

using namespace mpistage;

/// FNV-1a of everything a batch carries: step, ids, valid flags and every field's bytes.
std::uint64_t digest(const HostBatch& b) {
    std::string s = std::to_string(b.epoch()) + "/" + std::to_string(b.step()) + ":";
    s.append(reinterpret_cast<const char*>(b.index()), b.size() * sizeof(std::int64_t));
    s.append(reinterpret_cast<const char*>(b.valid()), b.size());
    for (const HostField& f : b.fields()) {
        s.append(reinterpret_cast<const char*>(f.data), f.size_bytes);
        if (f.offsets) s.append(reinterpret_cast<const char*>(f.offsets), (b.size() + 1) * 8);
    }
    return fnv1a64(s);
}

/// Digests of the batches of `epoch` from `loader`, stopping after `limit` batches.
std::vector<std::uint64_t> digests(Loader& loader, std::uint64_t epoch,
                                   std::uint64_t limit = ~0ull) {
    std::vector<std::uint64_t> out;
    EpochRange range = loader.epoch(epoch);
    HostBatch b;
    while (out.size() < limit && range.next(b)) out.push_back(digest(b));
    return out;
}

LoaderOptions options(Sharding sharding, Remainder rem, std::uint64_t batch, bool balance) {
    LoaderOptions o;
    o.plan.batch_size = batch;
    o.plan.sharding = sharding;
    o.plan.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
    o.plan.remainder = rem;
    o.plan.seed = 99;
    o.plan.balance_steps = balance;
    o.pipeline.prefetch = 3;  // batches prefetched but not consumed must not count
    o.pipeline.io_threads = 1;
    o.delivery.pin_memory = false;
    return o;
}

// For every option set: run k batches, save, restore (through JSON), continue; the digests
// equal the uninterrupted run's from step k on, and the state at the end points at epoch+1.
void check_same_world_resume(const Communicator& comm, const Source& src, bool ragged_sizes) {
    struct C {
        Sharding sharding;
        Remainder rem;
        std::uint64_t batch;
        bool balance;
    };
    std::vector<C> cases = {{Sharding::byte_range, Remainder::pad, 7, false},
                            {Sharding::global, Remainder::mask, 5, false},
                            {Sharding::global, Remainder::drop, 4, true}};
    for (const C& c : cases) {
        const LoaderOptions o = options(c.sharding, c.rem, c.batch, c.balance);
        const std::string at = to_string(c.sharding) + " " + to_string(c.rem) +
                               (c.balance ? " balance_steps" : "") +
                               (ragged_sizes ? " (variable sizes)" : "");
        Loader full(comm, src, o);
        const auto expected = digests(full, 1);
        for (const std::uint64_t k : {std::uint64_t{0}, expected.size() / 2, expected.size()}) {
            LoaderState saved;
            {
                Loader first(comm, src, o);
                (void)digests(first, 1, k);
                saved = first.state();
            }
            if (k == expected.size()) {
                EXPECT_EQ(saved.epoch, 2u)
                    << at << ": a state at the epoch's end points at the next";
                EXPECT_EQ(saved.steps_consumed, 0u) << at;
                continue;
            }
            EXPECT_EQ(saved.epoch, 1u) << at;
            EXPECT_EQ(saved.steps_consumed, k) << at;
            EXPECT_LT(saved.to_json().size(), 600u) << saved.to_json();
            const LoaderState parsed = LoaderState::from_json(saved.to_json(), "test");
            EXPECT_TRUE(parsed == saved) << at;
            Loader resumed = Loader::restore(comm, src, o, parsed);
            EXPECT_TRUE(resumed.state() == saved) << at << ": restore keeps the state";
            const auto rest = digests(resumed, 1);
            const std::vector<std::uint64_t> want(expected.begin() + static_cast<std::ptrdiff_t>(k),
                                                  expected.end());
            EXPECT_EQ(rest, want) << at << " k=" << k << " rank " << comm.rank();
            EXPECT_EQ(resumed.state().epoch, 2u) << at;
            // The next epoch is whole again and equal to the uninterrupted loader's.
            EXPECT_EQ(digests(resumed, 2), digests(full, 2)) << at;
        }
    }
}

TEST(LoaderResume, SameWorldSizeGivesByteIdenticalBatchesHdf5) {
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, h5t::shared_files().generated_chunked);
    check_same_world_resume(comm, src, false);
    src.close();
    comm.free();
}

TEST(LoaderResume, SameWorldSizeGivesByteIdenticalBatchesIdx) {
    const auto& f = h5t::shared_files();
    ASSERT_TRUE(f.ok);
    Communicator comm(MPI_COMM_WORLD);
    RawSource src(comm, {parse_idx_header(f.fashion_images_idx, "images"),
                         parse_idx_header(f.fashion_labels_idx, "labels")});
    check_same_world_resume(comm, src, false);
    comm.free();
}

// Records of sizes 1..300 bytes, every 9th one with a broken payload CRC (skipped).
std::string write_tfrecord_with_damage(const Communicator& comm, std::uint64_t* skipped) {
    const std::string dir = tfrecord_test::shared_tmp_dir(comm);
    const std::string path = dir + "/damaged.tfrecord";
    std::uint64_t bad = 0;
    if (comm.rank() == 0) {
        std::vector<std::uint8_t> bytes;
        for (std::size_t i = 0; i < 400; ++i) {
            std::vector<std::uint8_t> payload(1 + (i * 37) % 300, static_cast<std::uint8_t>(i));
            const std::size_t at = bytes.size();
            tfrecord::append_record(bytes, payload.data(), payload.size());
            if (i % 9 == 4) {
                bytes[at + 12] ^= 0x40;  // first payload byte: the payload CRC fails
                ++bad;
            }
        }
        tfrecord_test::spit(path, bytes);
    }
    *skipped = std::stoull(comm.broadcast(std::to_string(bad), 0));
    return path;
}

TEST(LoaderResume, SameWorldSizeGivesByteIdenticalBatchesTfRecordWithSkips) {
    Communicator comm(MPI_COMM_WORLD);
    std::uint64_t skipped = 0;
    const std::string path = write_tfrecord_with_damage(comm, &skipped);
    TfRecordOptions to;
    to.on_corrupt = OnCorrupt::skip;
    TfRecordSource src(comm, {path}, to);
    ASSERT_EQ(src.skipped_records(), skipped);
    Loader probe(comm, src, options(Sharding::global, Remainder::mask, 5, false));
    EXPECT_EQ(probe.state().skipped_records, skipped);
    check_same_world_resume(comm, src, true);
    src.close();
    comm.free();
}

// W ranks consume k steps; W−1 ranks (a sub-communicator) restore and finish the epoch: the
// union of valid ids is every sample exactly once.
TEST(LoaderResume, SmallerWorldSizeYieldsExactlyTheRest) {
    Communicator world(MPI_COMM_WORLD);
    if (world.size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
    const std::string path = h5t::shared_files().generated_contiguous;
    const LoaderOptions o = options(Sharding::global, Remainder::mask, 3, true);
    std::vector<std::int64_t> consumed;
    LoaderState saved;
    {
        Hdf5Source src(world, path);
        Loader first(world, src, o);
        EpochRange range = first.epoch(0);
        HostBatch b;
        for (int k = 0; k < 4 && range.next(b); ++k) {
            for (std::size_t j = 0; j < b.size(); ++j) {
                if (b.valid()[j]) consumed.push_back(b.index()[j]);
            }
        }
        saved = first.state();
        src.close();
    }
    const auto before = h5t::allgatherv(consumed);
    EXPECT_EQ(saved.samples_consumed, before.size());
    MPI_Comm sub_raw = MPI_COMM_NULL;
    const bool member = world.rank() < world.size() - 1;
    MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world.rank(), &sub_raw);
    std::vector<std::int64_t> rest;
    if (member) {
        Communicator sub(sub_raw);
        Hdf5Source src(sub, path);
        Loader resumed = Loader::restore(sub, src, o, saved);
        std::uint64_t steps = 0;
        for (const HostBatch& b : resumed.epoch(0)) {
            ++steps;
            for (std::size_t j = 0; j < b.size(); ++j) {
                if (b.valid()[j]) rest.push_back(b.index()[j]);
            }
        }
        EXPECT_EQ(sub.allreduce_min(steps), sub.allreduce_max(steps)) << "equal steps";
        src.close();
        sub.free();
        MPI_Comm_free(&sub_raw);
    }
    auto all = h5t::allgatherv(rest);
    all.insert(all.end(), before.begin(), before.end());
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> want(h5t::kGeneratedRows);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int64_t>(i);
    EXPECT_EQ(all, want) << "every sample exactly once across both world sizes";
    world.free();
}

TEST(LoaderResume, IncompatibleStatesFailOnEveryRank) {
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, h5t::shared_files().generated_chunked);
    const LoaderOptions o = options(Sharding::byte_range, Remainder::pad, 4, false);
    LoaderState s = Loader(comm, src, o).state();
    LoaderOptions other_seed = o;
    other_seed.plan.seed = 100;
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader::restore(comm, src, other_seed, s), "'seed'");
    LoaderState other_w = s;
    other_w.world_size = comm.size() + 1;
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader::restore(comm, src, o, other_w), "byte_range",
                          "same world size");
    LoaderState other_data = s;
    other_data.dataset_fingerprint = "0000000000000000";
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader::restore(comm, src, o, other_data),
                          "another dataset");
    LoaderState differs = s;
    if (comm.rank() == comm.size() - 1) differs.steps_consumed = 1;
    if (comm.size() > 1) {
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader::restore(comm, src, o, differs),
                              "differs across ranks");
    }
    LoaderState beyond = s;
    beyond.steps_consumed = 1000000;
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader::restore(comm, src, o, beyond), "steps_consumed");
    EXPECT_THROW(LoaderState::from_json("{\"format_version\": 2}", "x.json"), ConfigError);
    EXPECT_THROW(LoaderState::from_json("not json", "x.json"), ConfigError);
    src.close();
    comm.free();
}

}  // namespace
