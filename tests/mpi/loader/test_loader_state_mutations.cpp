// Acceptance of state validation (docs/resume.md, "Validation"): a state saved mid-epoch has
// each key of its JSON mutated (±1, 0, negative, huge, a fraction, a string, another state's
// value); every mutated state is either refused (the same ConfigError on every rank) or
// resumes exactly once (the samples consumed before and the samples served after are every
// sample of the epoch once). Never a hang (every collective is watched), never silently
// missing samples. Registered at 2 ranks and at 3 (another world size).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;

LoaderOptions options(Sharding sharding, std::uint64_t batch) {
    LoaderOptions o;
    o.plan.batch_size = batch;
    o.plan.sharding = sharding;
    o.plan.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
    o.plan.remainder = Remainder::mask;
    o.plan.seed = 21;
    o.prefetch = 2;
    o.io_threads = 0;
    o.pin_memory = false;
    o.timeout = std::chrono::seconds(60);
    return o;
}

/// The valid ids of epoch `e` of `loader` (after `limit` batches it stops), all ranks.
std::vector<std::int64_t> consume(Loader& loader, std::uint64_t e, std::uint64_t limit) {
    std::vector<std::int64_t> ids;
    EpochRange range = loader.epoch(e);
    HostBatch b;
    for (std::uint64_t k = 0; k < limit && range.next(b); ++k) {
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (b.valid()[j]) ids.push_back(b.index()[j]);
        }
    }
    return h5t::allgatherv(ids);
}

struct Saved {
    LoaderState state;
    std::vector<std::int64_t> consumed;
};

Saved save_after(const Communicator& comm, const Source& src, const LoaderOptions& o,
                 std::uint64_t steps) {
    Loader loader(comm, src, o);
    Saved s;
    s.consumed = consume(loader, 0, steps);
    s.state = loader.state();
    return s;
}

/// The mutated values of `v` (a number, a string or a bool).
std::vector<nlohmann::json> mutations_of(const nlohmann::json& v, const nlohmann::json& other) {
    std::vector<nlohmann::json> out = {other, nlohmann::json("x"), nlohmann::json(nullptr)};
    if (v.is_number_integer()) {
        const auto x = v.get<std::int64_t>();
        for (const std::int64_t d : {x + 1, x - 1, std::int64_t{0}, std::int64_t{-1}, -x - 7}) {
            out.emplace_back(d);
        }
        out.emplace_back(std::numeric_limits<std::uint64_t>::max());
        out.emplace_back(std::uint64_t{1} << 40);
        out.emplace_back(2.5);
        out.emplace_back(1e30);
    } else if (v.is_boolean()) {
        out.emplace_back(!v.get<bool>());
    } else if (v.is_string()) {
        out.emplace_back(v.get<std::string>() + "0");
        out.emplace_back("");
    }
    return out;
}

struct Tally {
    int refused_parse = 0;
    int refused_restore = 0;
    int resumed = 0;
    int other_epoch = 0;
};

/// Mutates every key of `saved`'s state; `other` supplies another state's values.
Tally mutate_and_resume(const Communicator& comm, const Source& src, const LoaderOptions& o,
                        const Saved& saved, const LoaderState& other, std::uint64_t n) {
    Tally t;
    const nlohmann::json base = nlohmann::json::parse(saved.state.to_json());
    const nlohmann::json theirs = nlohmann::json::parse(other.to_json());
    for (const auto& [key, value] : base.items()) {
        for (const nlohmann::json& m : mutations_of(value, theirs[key])) {
            if (m == value) continue;
            nlohmann::json j = base;
            j[key] = m;
            const std::string what = key + " " + value.dump() + " -> " + m.dump();
            LoaderState parsed;
            bool parse_ok = true;
            try {
                parsed = LoaderState::from_json(j.dump(), "mutated");
            } catch (const ConfigError&) {
                parse_ok = false;  // local and deterministic: the same on every rank
            }
            EXPECT_EQ(comm.allreduce_min(parse_ok), comm.allreduce_max(parse_ok)) << what;
            if (!parse_ok) {
                ++t.refused_parse;
                continue;
            }
            std::string error;
            std::vector<std::int64_t> rest;
            const std::uint64_t epoch = parsed.epoch;
            try {
                Loader resumed = Loader::restore(comm, src, o, parsed);
                rest = consume(resumed, epoch, std::numeric_limits<std::uint64_t>::max());
            } catch (const ConfigError& e) {
                error = e.what();
            }
            const std::uint64_t h = fnv1a64(error);
            EXPECT_EQ(comm.allreduce_min(h), comm.allreduce_max(h))
                << what << ": not the same outcome on every rank: " << error;
            if (!error.empty()) {
                ++t.refused_restore;
                continue;
            }
            ++t.resumed;
            if (key == "epoch") {
                // Any epoch is an epoch: the library cannot tell which one the consumed part
                // belonged to (the CLI refuses epochs outside the run and, with --verify,
                // counts the id log against what follows). The resume still continues at the
                // saved point of that epoch: the rest of it, each sample once.
                std::vector<std::int64_t> sorted = rest;
                std::sort(sorted.begin(), sorted.end());
                EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << what;
                EXPECT_EQ(rest.size() + saved.consumed.size(), n) << what;
                ++t.other_epoch;
                continue;
            }
            // Resumed: what the first run consumed of epoch 0 and what this one served of the
            // state's epoch are every sample once, and that epoch is epoch 0.
            std::vector<std::int64_t> all = saved.consumed;
            all.insert(all.end(), rest.begin(), rest.end());
            std::sort(all.begin(), all.end());
            std::vector<std::int64_t> want(n);
            for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<std::int64_t>(i);
            EXPECT_EQ(all, want) << what << ": accepted but not exactly once (" << all.size()
                                 << " ids)";
            EXPECT_EQ(epoch, saved.state.epoch) << what << ": accepted for another epoch";
        }
    }
    return t;
}

void run_property(Sharding sharding, std::uint64_t batch, std::uint64_t steps,
                  std::uint64_t other_steps) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = h5t::shared_files().generated_contiguous;
    Hdf5Source src(comm, path);
    const LoaderOptions o = options(sharding, batch);
    const Saved saved = save_after(comm, src, o, steps);
    const Saved other = save_after(comm, src, options(sharding, batch + 2), other_steps);
    const Tally t = mutate_and_resume(comm, src, o, saved, other.state, src.num_samples());
    // The unmutated state resumes; most mutations are refused, a few are harmless (e.g.
    // balance_steps, which may differ between runs).
    EXPECT_GT(t.refused_parse + t.refused_restore, 100);
    if (comm.rank() == 0) {
        std::printf("%s: %d refused when parsed, %d refused by restore, %d resumed (%d of "
                    "them at another epoch)\n",
                    to_string(sharding).c_str(), t.refused_parse, t.refused_restore, t.resumed,
                    t.other_epoch);
    }
    src.close();
    comm.free();
}

TEST(StateMutations, GlobalShardingEveryMutationRefusedOrExactlyOnce) {
    run_property(Sharding::global, 3, 4, 7);
}

TEST(StateMutations, ByteRangeEveryMutationRefusedOrExactlyOnce) {
    run_property(Sharding::byte_range, 5, 3, 5);
}

}  // namespace
