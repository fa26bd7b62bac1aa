// Acceptance of state validation (docs/resume.md, "Validation"): a state saved inside epoch 1
// (after a whole epoch 0) has each key of its JSON mutated (±1, 0, negative, huge, a fraction,
// a string, another state's value), and the pair steps_consumed/samples_consumed replaced by
// the consistent pair of a later state of the same run; every mutated state is either refused
// (the same ConfigError on every rank) or resumes exactly once (the samples consumed before
// and the samples served after are every sample of the epoch once, in the saved epoch). An
// `epoch` moved to the epoch before or after (both inside the run) is refused by the
// consumed-id digest. Fixed batches (HDF5) and budget batches (TFRecord records of
// heavy-tailed sizes), each with global and byte_range sharding. Never a hang (every
// collective is watched), never silently missing samples. Registered at 2 ranks and at 3.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "budget_test_util.hpp"
#include "loader/fingerprint.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tfrecord_source.hpp"

namespace {

using namespace mpistage;

/// Fixed batches of `batch` samples, or (batch_bytes > 0) budget batches of that many bytes.
LoaderOptions options(Sharding sharding, std::uint64_t batch, std::uint64_t batch_bytes = 0) {
    LoaderOptions o;
    o.plan.batch_size = batch;
    o.plan.sharding = sharding;
    o.plan.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
    o.plan.remainder = Remainder::mask;
    o.plan.seed = 21;
    o.plan.budget.batch_bytes = batch_bytes;
    o.plan.budget.bucket_window = batch_bytes > 0 && sharding == Sharding::global ? 4 : 0;
    o.pipeline.prefetch = 2;
    o.pipeline.io_threads = 0;
    o.delivery.pin_memory = false;
    o.safety.timeout = std::chrono::seconds(60);
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
    std::vector<std::int64_t> consumed;  ///< of the state's epoch (1), all ranks
};

/// The state after the whole epoch 0 and `steps` steps of epoch 1.
Saved save_after(const Communicator& comm, const Source& src, const LoaderOptions& o,
                 std::uint64_t steps) {
    Loader loader(comm, src, o);
    (void)consume(loader, 0, std::numeric_limits<std::uint64_t>::max());
    Saved s;
    s.consumed = consume(loader, 1, steps);
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
    int refused_digest = 0;
    int resumed = 0;
};

/// One mutated state `j` (named `what`): refused when parsed or restored, the same way on
/// every rank, or resumed exactly once in the saved epoch. Returns the restore's error.
std::string try_resume(const Communicator& comm, const Source& src, const LoaderOptions& o,
                       const Saved& saved, const nlohmann::json& j, const std::string& what,
                       Tally& t) {
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
        return "parse";
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
        t.refused_digest += error.find("'consumed_digest'") != std::string::npos ? 1 : 0;
        return error;
    }
    ++t.resumed;
    // Resumed: what the first run consumed of the saved epoch and what this one served of the
    // state's epoch are every sample once, and that epoch is the saved one.
    std::vector<std::int64_t> all = saved.consumed;
    all.insert(all.end(), rest.begin(), rest.end());
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> want(src.num_samples());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = static_cast<std::int64_t>(i);
    EXPECT_EQ(all, want) << what << ": accepted but not exactly once (" << all.size() << " ids)";
    EXPECT_EQ(epoch, saved.state.epoch) << what << ": accepted for another epoch";
    return error;
}

/// Mutates every key of `saved`'s state (`other` supplies another state's values, `later`
/// the consistent steps/samples pair of a later point of the same run).
Tally mutate_and_resume(const Communicator& comm, const Source& src, const LoaderOptions& o,
                        const Saved& saved, const LoaderState& other, const LoaderState& later) {
    Tally t;
    const nlohmann::json base = nlohmann::json::parse(saved.state.to_json());
    const nlohmann::json theirs = nlohmann::json::parse(other.to_json());
    for (const auto& [key, value] : base.items()) {
        for (const nlohmann::json& m : mutations_of(value, theirs[key])) {
            if (m == value) continue;
            nlohmann::json j = base;
            j[key] = m;
            const std::string what = key + " " + value.dump() + " -> " + m.dump();
            const std::string error = try_resume(comm, src, o, saved, j, what, t);
            if (key == "epoch" && m.is_number_unsigned() &&
                (m.get<std::uint64_t>() == 0 || m.get<std::uint64_t>() == 2)) {
                // The epoch before or after, both inside the run. With fixed batches the
                // resume point is as valid there, and only the digest of the consumed ids
                // tells; budget batches may already fail the batch-list check.
                EXPECT_FALSE(error.empty()) << what;
                if (!o.plan.budget.active()) {
                    EXPECT_NE(error.find("'consumed_digest'"), std::string::npos)
                        << what << ": " << error;
                }
            }
        }
    }
    // Consistent edits of the resume point (steps with their samples) are refused as well.
    nlohmann::json j = base;
    j["steps_consumed"] = later.steps_consumed;
    j["samples_consumed"] = later.samples_consumed;
    const std::string error =
        try_resume(comm, src, o, saved, j, "steps/samples of a later state", t);
    EXPECT_NE(error.find("'consumed_digest'"), std::string::npos) << error;
    return t;
}

void run_property(const Communicator& comm, const Source& src, const LoaderOptions& o,
                  const LoaderOptions& other_options, std::uint64_t steps,
                  std::uint64_t other_steps) {
    const Saved saved = save_after(comm, src, o, steps);
    ASSERT_EQ(saved.state.epoch, 1u);  // the same on every rank
    ASSERT_EQ(saved.state.steps_consumed, steps);
    const Saved other = save_after(comm, src, other_options, other_steps);
    const Saved later = save_after(comm, src, o, steps + 2);
    const Tally t = mutate_and_resume(comm, src, o, saved, other.state, later.state);
    {
        // A state of format version 3 (no digest) is refused by default (issue "The last
        // silent edges", F2: its keys can be edited consistently and nothing would tell);
        // with accept_legacy_state it resumes, and restore computes the digest the saving run
        // summed.
        // A version-3 state's "sampled" fingerprint covered every sample's size (`sampled_v4`):
        // the value such a state holds.
        nlohmann::json v3 = nlohmann::json::parse(saved.state.to_json());
        v3["format_version"] = 3;
        v3.erase("consumed_digest");
        ASSERT_EQ(saved.state.fingerprint_level, FingerprintLevel::sampled);
        v3["dataset_fingerprint"] =
            detail::dataset_fingerprint(comm, src, src.num_samples(), saved.state.skipped_records,
                                        FingerprintLevel::sampled_v4);
        const LoaderState legacy = LoaderState::from_json(v3.dump(), "v3");
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader::restore(comm, src, o, legacy),
                              "accept_legacy_state");
        LoaderOptions accepting = o;
        accepting.safety.accept_legacy_state = true;
        Loader old = Loader::restore(comm, src, accepting, legacy);
        EXPECT_EQ(old.state().consumed_digest, saved.state.consumed_digest);
        EXPECT_EQ(old.state().format_version, LoaderState::kFormatVersion);
    }
    // The unmutated state resumes; most mutations are refused, a few are harmless (e.g.
    // balance_steps, which may differ between runs).
    EXPECT_GT(t.refused_parse + t.refused_restore, 100);
    // Fixed batches: epoch 0, epoch 2 and the later steps/samples; budget: at least the last.
    EXPECT_GE(t.refused_digest, o.plan.budget.active() ? 1 : 3);
    if (comm.rank() == 0) {
        std::printf(
            "%s%s: %d refused when parsed, %d refused by restore (%d of them by the "
            "consumed-id digest), %d resumed\n",
            to_string(o.plan.sharding).c_str(), o.plan.budget.active() ? " budget" : "",
            t.refused_parse, t.refused_restore, t.refused_digest, t.resumed);
    }
}

void run_fixed(Sharding sharding, std::uint64_t batch, std::uint64_t steps,
               std::uint64_t other_steps) {
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, h5t::shared_files().generated_contiguous);
    run_property(comm, src, options(sharding, batch), options(sharding, batch + 2), steps,
                 other_steps);
    src.close();
    comm.free();
}

void run_budget(Sharding sharding, std::uint64_t steps, std::uint64_t other_steps) {
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {budget_test::write_variable_tfrecord(comm)});
    run_property(comm, src, options(sharding, 1, 12000), options(sharding, 1, 15000), steps,
                 other_steps);
    src.close();
    comm.free();
}

TEST(StateMutations, GlobalShardingEveryMutationRefusedOrExactlyOnce) {
    run_fixed(Sharding::global, 3, 4, 7);
}

TEST(StateMutations, ByteRangeEveryMutationRefusedOrExactlyOnce) {
    run_fixed(Sharding::byte_range, 5, 3, 5);
}

TEST(StateMutations, BudgetGlobalEveryMutationRefusedOrExactlyOnce) {
    run_budget(Sharding::global, 3, 5);
}

TEST(StateMutations, BudgetByteRangeEveryMutationRefusedOrExactlyOnce) {
    run_budget(Sharding::byte_range, 2, 4);
}

}  // namespace
