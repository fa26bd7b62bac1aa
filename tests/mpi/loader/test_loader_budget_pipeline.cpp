// Budget batches through the whole Loader at 1-4 ranks: the prefetch ring (prefetch > 1), I/O
// threads (> 1), the memory tier (within a node and across emulated nodes), exactly once and
// equal steps with payloads checked against the generator; and state/restore: the same world
// size resumes slot for slot, a smaller one (a sub-communicator of MPI_COMM_WORLD, 4 -> 3 at
// four ranks) under global sharding yields exactly the samples not yet consumed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "budget_test_util.hpp"
#include "loader_test_util.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tfrecord_source.hpp"

namespace {

using namespace mpistage;
using budget_test::kRecords;
using budget_test::payload_byte;
using budget_test::record_length;

constexpr std::uint64_t kBudget = 12000;

using BudgetSetup = loader_test::Config;

/// A loader configuration of budget batches of `kBudget` bytes (bucketing with global).
BudgetSetup setup(Sharding sharding, Stage stage, std::size_t prefetch, std::size_t io_threads,
                  int ranks_per_node) {
    BudgetSetup c;
    c.sharding = sharding;
    c.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
    c.stage = stage;
    c.prefetch = prefetch;
    c.io_threads = io_threads;
    c.ranks_per_node = ranks_per_node;
    return c;
}

LoaderOptions budget_options(const BudgetSetup& c) {
    LoaderOptions o = c.options();
    o.plan.budget.batch_bytes = kBudget;
    o.plan.budget.bucket_window = c.sharding == Sharding::global ? 4 : 0;
    return o;
}

/// Valid ids of one batch; counts payload mismatches, over-budget batches and padding slots
/// that carry data.
struct Check {
    std::vector<std::int64_t> ids;
    std::uint64_t bad = 0;

    void add(const HostBatch& b, bool oversize) {
        const HostField& f = b.fields().at(0);
        std::uint64_t bytes = 0;
        for (std::size_t j = 0; j < b.size(); ++j) {
            const std::int64_t len = f.offsets[j + 1] - f.offsets[j];
            if (!b.valid()[j]) {
                bad += len != 0 || b.index()[j] != kPaddingId ? 1 : 0;
                continue;
            }
            const auto id = static_cast<std::uint64_t>(b.index()[j]);
            ids.push_back(b.index()[j]);
            bytes += static_cast<std::uint64_t>(len);
            bool ok = static_cast<std::uint64_t>(len) == record_length(id);
            for (std::int64_t k = 0; ok && k < len; ++k) {
                ok = static_cast<std::uint8_t>(f.data[f.offsets[j] + k]) ==
                     payload_byte(id, static_cast<std::uint64_t>(k));
            }
            bad += ok ? 0 : 1;
        }
        const bool single_over = b.num_valid() == 1 && bytes > kBudget;
        bad += bytes > kBudget && !single_over ? 1 : 0;
        bad += oversize != single_over ? 1 : 0;
        bad += b.num_valid() == 0 && b.size() != 1 ? 1 : 0;  // padding batches: one slot
    }
};

/// Collective: the sorted valid ids of all ranks.
std::vector<std::int64_t> all_ids(const std::vector<std::int64_t>& mine) {
    auto all = h5t::allgatherv(mine);
    std::sort(all.begin(), all.end());
    return all;
}

std::vector<std::int64_t> every_id() {
    std::vector<std::int64_t> want(kRecords);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int64_t>(i);
    return want;
}

TEST(LoaderBudgetPipeline, RingThreadsAndMemoryTierExactlyOnceEqualSteps) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = budget_test::write_variable_tfrecord(comm);
    TfRecordSource src(comm, {path});
    const std::vector<BudgetSetup> setups = {
        setup(Sharding::byte_range, Stage::none, 1, 0, 0),
        setup(Sharding::byte_range, Stage::none, 3, 2, 0),
        setup(Sharding::global, Stage::none, 4, 3, 0),
        setup(Sharding::byte_range, Stage::memory, 3, 2, 0),
        setup(Sharding::global, Stage::memory, 2, 2, 0),
        setup(Sharding::global, Stage::memory, 4, 3, 1),  // every other rank a remote node
    };
    for (const BudgetSetup& s : setups) {
        SCOPED_TRACE(s.str());
        Loader loader(comm, src, budget_options(s));
        EXPECT_EQ(loader.stats().tier, s.stage == Stage::memory ? "memory" : "file");
        for (const std::uint64_t epoch : {0u, 1u}) {
            Check c;
            std::uint64_t steps = 0;
            EpochRange range = loader.epoch(epoch);
            for (const HostBatch& b : range) {
                EXPECT_EQ(b.step(), steps);
                ++steps;
                c.add(b, range.plan().batch_oversize(b.step()));
            }
            EXPECT_EQ(steps, range.steps());
            EXPECT_EQ(comm.allreduce_min(steps), comm.allreduce_max(steps)) << "equal steps";
            EXPECT_EQ(comm.allreduce_sum(c.bad), 0u) << "payload, budget or padding wrong";
            EXPECT_EQ(all_ids(c.ids), every_id()) << "epoch " << epoch << " not exactly once";
            EXPECT_EQ(range.totals().valid_samples, kRecords);
            EXPECT_EQ(
                comm.allreduce_sum(range.plan().steps -
                                   [&] {
                                       std::uint64_t real = 0;
                                       for (std::uint64_t k = 0; k < range.plan().steps; ++k) {
                                           real += range.plan().valid[range.plan().batch_begin(k)];
                                       }
                                       return real;
                                   }()),
                range.plan().budget.padding_steps);
        }
        EXPECT_EQ(comm.allreduce_sum(loader.stats().valid_samples), 2 * kRecords);
    }
    src.close();
    comm.free();
}

/// Digests of every batch (step, ids, valid, every field's bytes and offsets) of `epoch`,
/// stopping after `limit` batches.
std::vector<std::uint64_t> digests(Loader& loader, std::uint64_t epoch,
                                   std::uint64_t limit = ~0ull) {
    std::vector<std::uint64_t> out;
    EpochRange range = loader.epoch(epoch);
    HostBatch b;
    while (out.size() < limit && range.next(b)) {
        std::string s = std::to_string(b.step()) + ":";
        s.append(reinterpret_cast<const char*>(b.index()), b.size() * sizeof(std::int64_t));
        s.append(reinterpret_cast<const char*>(b.valid()), b.size());
        for (const HostField& f : b.fields()) {
            s.append(reinterpret_cast<const char*>(f.data), f.size_bytes);
            s.append(reinterpret_cast<const char*>(f.offsets), (b.size() + 1) * 8);
        }
        out.push_back(fnv1a64(s));
    }
    return out;
}

TEST(LoaderBudgetPipeline, SameWorldSizeResumesSlotForSlot) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = budget_test::write_variable_tfrecord(comm);
    TfRecordSource src(comm, {path});
    for (const BudgetSetup& s : {setup(Sharding::byte_range, Stage::none, 3, 2, 0),
                                 setup(Sharding::global, Stage::memory, 3, 2, 0)}) {
        SCOPED_TRACE(s.str());
        Loader full(comm, src, budget_options(s));
        const auto expected = digests(full, 1);
        const std::uint64_t k = expected.size() / 2;
        LoaderState saved;
        {
            Loader first(comm, src, budget_options(s));
            (void)digests(first, 1, k);
            saved = first.state();
        }
        EXPECT_EQ(saved.epoch, 1u);
        EXPECT_EQ(saved.steps_consumed, k);
        const LoaderState parsed = LoaderState::from_json(saved.to_json(), "test");
        EXPECT_TRUE(parsed == saved);
        Loader resumed = Loader::restore(comm, src, budget_options(s), parsed);
        const std::vector<std::uint64_t> want(expected.begin() + static_cast<std::ptrdiff_t>(k),
                                              expected.end());
        EXPECT_EQ(digests(resumed, 1), want) << "rank " << comm.rank();
        EXPECT_EQ(resumed.state().epoch, 2u);
        EXPECT_EQ(digests(resumed, 2), digests(full, 2)) << "the next epoch is whole";
        LoaderOptions other = budget_options(s);
        other.plan.budget.batch_bytes = kBudget + 1;
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader::restore(comm, src, other, parsed), "'budget'");
    }
    src.close();
    comm.free();
}

// W ranks consume half the steps of an epoch of budget batches and save; W−1 ranks (a
// sub-communicator of MPI_COMM_WORLD: 4 -> 3 at four ranks) restore under global sharding and
// finish the epoch: every sample exactly once across both, equal steps; the next epoch is whole.
TEST(LoaderBudgetPipeline, SmallerWorldSizeResumesExactlyOnceUnderGlobalSharding) {
    Communicator world(MPI_COMM_WORLD);
    if (world.size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
    const std::string path = budget_test::write_variable_tfrecord(world);
    const LoaderOptions o = budget_options(setup(Sharding::global, Stage::none, 3, 2, 0));
    std::vector<std::int64_t> consumed;
    LoaderState saved;
    std::uint64_t k = 0;
    {
        TfRecordSource src(world, {path});
        Loader first(world, src, o);
        EpochRange range = first.epoch(0);
        k = range.steps() / 2;  // equal on every rank
        HostBatch b;
        for (std::uint64_t i = 0; i < k && range.next(b); ++i) {
            for (std::size_t j = 0; j < b.size(); ++j) {
                if (b.valid()[j]) consumed.push_back(b.index()[j]);
            }
        }
        saved = LoaderState::from_json(first.state().to_json(), "test");
        src.close();
    }
    const auto before = h5t::allgatherv(consumed);
    EXPECT_EQ(saved.samples_consumed, before.size());
    EXPECT_GE(k, 1u) << "the epoch is long enough to stop inside it";
    EXPECT_EQ(saved.steps_consumed, k);
    EXPECT_EQ(saved.epoch, 0u);
    MPI_Comm sub_raw = MPI_COMM_NULL;
    const bool member = world.rank() < world.size() - 1;
    MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world.rank(), &sub_raw);
    std::vector<std::int64_t> rest;
    std::vector<std::int64_t> next_epoch;
    if (member) {
        Communicator sub(sub_raw);
        TfRecordSource src(sub, {path});
        LoaderOptions at_three = o;
        at_three.tier.stage = Stage::memory;  // the continuation may serve from another tier
        Loader resumed = Loader::restore(sub, src, at_three, saved);
        Check c;
        std::uint64_t steps = 0;
        EpochRange range = resumed.epoch(0);
        for (const HostBatch& b : range) {
            EXPECT_EQ(b.step(), k + steps) << "steps are numbered on from the saved state";
            ++steps;
            c.add(b, range.plan().batch_oversize(b.step() - range.plan().first_step));
        }
        rest = c.ids;
        EXPECT_EQ(sub.allreduce_min(steps), sub.allreduce_max(steps)) << "equal steps";
        EXPECT_EQ(sub.allreduce_sum(c.bad), 0u);
        EXPECT_EQ(resumed.state().epoch, 1u);
        Check whole;
        EpochRange next = resumed.epoch(1);
        for (const HostBatch& b : next) whole.add(b, next.plan().batch_oversize(b.step()));
        next_epoch = whole.ids;
        EXPECT_EQ(sub.allreduce_sum(whole.bad), 0u);
        src.close();
        sub.free();
        MPI_Comm_free(&sub_raw);
    }
    std::vector<std::int64_t> both = before;
    const auto later = h5t::allgatherv(rest);
    both.insert(both.end(), later.begin(), later.end());
    std::sort(both.begin(), both.end());
    EXPECT_EQ(both, every_id()) << "every sample exactly once across both world sizes";
    EXPECT_EQ(all_ids(next_epoch), every_id()) << "the next epoch is whole";
    world.free();
}

}  // namespace
