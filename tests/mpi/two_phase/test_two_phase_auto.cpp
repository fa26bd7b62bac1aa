// `TwoPhase::automatic` through the Loader (issue 21): the decision is measured once at
// construction and is the same on every rank, the epochs deliver every sample exactly once with
// the same batches as the plain global reads whichever way it went, a source whose requests are
// slow (2 ms a coalesced run) and a step that covers most of each slab chooses two-phase
// reads, the same source read by 4 I/O threads declines them, and outside global sharding
// `auto` resolves to off without measuring.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "../tier/tier_test_util.hpp"
#include "h5t_checks.hpp"
#include "h5t_files.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "two_phase/two_phase_choice.hpp"

using namespace mpistage;

namespace {

/// Delegates to `inner`; every `read` first sleeps `per_run` per coalesced run of its ids (a
/// file system whose requests cost a fixed latency, like benchmarks/pfs).
class SlowSource final : public Source {
public:
    SlowSource(const Source& inner, std::chrono::microseconds per_run)
        : inner_(inner), per_run_(per_run) {}
    const std::vector<FieldInfo>& fields() const override { return inner_.fields(); }
    std::uint64_t num_samples() const override { return inner_.num_samples(); }
    std::uint64_t records_in_cut(int rank, int world_size) const override {
        return inner_.records_in_cut(rank, world_size);
    }
    std::string fingerprint() const override { return inner_.fingerprint(); }
    std::uint64_t sample_bytes(std::uint64_t id) const override { return inner_.sample_bytes(id); }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        const auto runs = detail::coalesced_runs(std::vector<std::uint64_t>(ids, ids + count));
        std::this_thread::sleep_for(per_run_ * static_cast<long>(runs));
        inner_.read(ids, count, sink);
    }

private:
    const Source& inner_;
    std::chrono::microseconds per_run_;
};

LoaderOptions options_of(std::uint64_t batch, std::size_t threads, TwoPhase mode) {
    LoaderOptions o;
    o.plan.batch_size = batch;
    o.plan.remainder = Remainder::pad;
    o.plan.sharding = Sharding::global;
    o.plan.shuffle = Shuffle::global;
    o.plan.seed = 21;
    o.pipeline.prefetch =
        std::max<std::size_t>(2, threads);  // reads in flight: min(threads, slots)
    o.pipeline.io_threads = threads;
    o.delivery.pin_memory = false;
    o.delivery.device = "cpu";
    o.pipeline.two_phase = mode;
    return o;
}

/// Per-batch hashes (ids and bytes of every field) of epoch `e`, and the yield.
std::vector<std::uint64_t> epoch_hashes(Loader& loader, std::uint64_t e, tier_test::Yield& y) {
    std::vector<std::uint64_t> hashes;
    try {
        for (const HostBatch& b : loader.epoch(e)) {
            ++y.batches;
            std::string s(reinterpret_cast<const char*>(b.index()), b.size() * 8);
            for (const HostField& f : b.fields()) {
                s.append(reinterpret_cast<const char*>(f.data), f.size_bytes);
            }
            hashes.push_back(h5t::fnv(s));
            for (std::size_t k = 0; k < b.size(); ++k) {
                if (b.valid()[k]) y.valid_ids.push_back(b.index()[k]);
            }
        }
    } catch (const std::exception& ex) {
        y.error = ex.what();
    }
    return hashes;
}

/// Collective: `auto` over `src` decides the same on every rank (and as `want` when given),
/// reports it, and two epochs equal the plain loader's batches, each sample exactly once.
/// Returns the decision.
bool check_auto(const Source& src, std::uint64_t batch, std::size_t threads, int want,
                const std::string& what) {
    Communicator comm(MPI_COMM_WORLD);
    Loader plain(comm, src, options_of(batch, threads, TwoPhase::off));
    Loader autom(comm, src, options_of(batch, threads, TwoPhase::automatic));
    const LoaderStats& st = autom.stats();
    EXPECT_TRUE(h5t::same_on_all_ranks(st.two_phase ? 1 : 0)) << what;
    EXPECT_TRUE(h5t::same_on_all_ranks(h5t::fnv(st.two_phase_note))) << what;
    const std::string head = st.two_phase ? "two-phase auto: on:" : "two-phase auto: off:";
    EXPECT_EQ(st.two_phase_note.rfind(head, 0), 0u) << what << ": " << st.two_phase_note;
    EXPECT_GT(st.two_phase_plain_step_seconds, 0) << what;
    EXPECT_GT(st.two_phase_step_seconds, 0) << what;
    EXPECT_EQ(st.two_phase, st.two_phase_step_seconds <= 0.8 * st.two_phase_plain_step_seconds)
        << what;
    if (want >= 0) EXPECT_EQ(st.two_phase, want == 1) << what << ": " << st.two_phase_note;
    EXPECT_FALSE(plain.stats().two_phase);
    EXPECT_TRUE(plain.stats().two_phase_note.empty());
    for (std::uint64_t e = 0; e < 2; ++e) {
        tier_test::Yield yp, ya;
        const auto want_hashes = epoch_hashes(plain, e, yp);
        const auto got = epoch_hashes(autom, e, ya);
        EXPECT_EQ(got, want_hashes) << what << " epoch " << e;
        tier_test::expect_exactly_once(autom, ya, src.num_samples(), true,
                                       what + " epoch " + std::to_string(e));
    }
    const bool chosen = st.two_phase;
    comm.free();
    return chosen;
}

}  // namespace

TEST(TwoPhaseAuto, SameDecisionOnEveryRankAndExactlyOnce) {
    h5t::TempDir dir;
    ASSERT_TRUE(h5t::make_generated_file(dir.file("g.h5"), 233, false));
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, dir.file("g.h5"), Hdf5Options{{"images", "labels"}});
    check_auto(src, 8, 1, -1, "local file, B=8");  // either way, measured on this machine
    src.close();
    comm.free();
}

TEST(TwoPhaseAuto, SlowRequestsAndDenseSlabsChooseTwoPhase) {
    h5t::TempDir dir;
    ASSERT_TRUE(h5t::make_generated_file(dir.file("g.h5"), 233, false));
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source h5(comm, dir.file("g.h5"), Hdf5Options{{"images", "labels"}});
    const SlowSource src(h5, std::chrono::microseconds(2000));
    // W·B ≥ 200 of 233 samples a step: a slab's part of a step is a few long runs, a rank's
    // own 100 random ids about 57; at 2 ms a run two-phase predicts < 0.5 × plain.
    if (h5t::size() > 1) check_auto(src, 100, 1, 1, "2 ms a run, B=100");
    // Four I/O threads overlap the plain path's few runs: declined.
    check_auto(src, 4, 4, 0, "2 ms a run, B=4, 4 I/O threads");
    h5.close();
    comm.free();
}

TEST(TwoPhaseAuto, OutsideGlobalShardingResolvesToOffWithoutMeasuring) {
    h5t::TempDir dir;
    ASSERT_TRUE(h5t::make_generated_file(dir.file("g.h5"), 57, false));
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, dir.file("g.h5"), Hdf5Options{{"images", "labels"}});
    LoaderOptions o = options_of(4, 1, TwoPhase::automatic);
    o.plan.sharding = Sharding::byte_range;
    o.plan.shuffle = Shuffle::local;
    Loader byte_range(comm, src, o);
    EXPECT_FALSE(byte_range.stats().two_phase);
    EXPECT_NE(byte_range.stats().two_phase_note.find("off without measuring (sharding byte_range"),
              std::string::npos)
        << byte_range.stats().two_phase_note;
    EXPECT_EQ(byte_range.stats().two_phase_plain_step_seconds, 0.0);
    LoaderOptions staged = options_of(4, 1, TwoPhase::automatic);
    staged.tier.stage = Stage::memory;
    Loader memory(comm, src, staged);
    EXPECT_FALSE(memory.stats().two_phase);
    EXPECT_NE(memory.stats().two_phase_note.find("stage memory"), std::string::npos);
    tier_test::Yield y =
        tier_test::consume(memory, 0, [](const HostBatch&, std::size_t) { return true; });
    tier_test::expect_exactly_once(memory, y, 57, true, "auto with stage memory");
    src.close();
    comm.free();
}
