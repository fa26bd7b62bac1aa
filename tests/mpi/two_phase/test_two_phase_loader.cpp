// LoaderOptions::two_phase through the Loader: the same batches (ids and bytes) as the plain
// global plan, exactly once with equal steps, an injected read error is the same error on every
// rank, and the option is refused (identically everywhere) outside global sharding / staging or
// when ranks disagree.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>

#include "../tier/tier_test_util.hpp"
#include "h5t_checks.hpp"
#include "h5t_files.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "two_phase_test_util.hpp"

using namespace mpistage;

namespace {

LoaderOptions options_of(std::uint64_t batch, Remainder rem, bool two_phase) {
    LoaderOptions o;
    o.plan.batch_size = batch;
    o.plan.remainder = rem;
    o.plan.sharding = Sharding::global;
    o.plan.shuffle = Shuffle::global;
    o.plan.seed = 5;
    o.pipeline.prefetch = 2;
    o.pipeline.io_threads = 2;  // not used by two-phase reads
    o.delivery.pin_memory = false;
    o.pipeline.two_phase = two_phase ? TwoPhase::on : TwoPhase::off;
    return o;
}

/// Hash of one batch: every slot's id and valid flag, every field's bytes (ragged: offsets
/// and values).
std::uint64_t batch_hash(const HostBatch& b) {
    std::string s(reinterpret_cast<const char*>(b.index()), b.size() * 8);
    s.append(reinterpret_cast<const char*>(b.valid()), b.size());
    for (const HostField& f : b.fields()) {
        s.append(reinterpret_cast<const char*>(f.data), f.size_bytes);
        if (f.offsets) s.append(reinterpret_cast<const char*>(f.offsets), (b.size() + 1) * 8);
    }
    return h5t::fnv(s);
}

/// Per-batch hashes of epoch `e`, and the yield for the exactly-once check.
std::vector<std::uint64_t> epoch_hashes(Loader& loader, std::uint64_t e, tier_test::Yield& y) {
    std::vector<std::uint64_t> hashes;
    try {
        for (const HostBatch& b : loader.epoch(e)) {
            ++y.batches;
            hashes.push_back(batch_hash(b));
            for (std::size_t s = 0; s < b.size(); ++s) {
                if (b.valid()[s]) y.valid_ids.push_back(b.index()[s]);
            }
        }
    } catch (const std::exception& ex) {
        y.error = ex.what();
    }
    return hashes;
}

/// Two epochs with and without two-phase reads: the same batches, exactly once, and the
/// two-phase loader's epochs read only ascending ids of this rank's slab.
void compare_with_plain(const Source& src, std::uint64_t batch, Remainder rem) {
    Communicator comm(MPI_COMM_WORLD);
    two_phase_test::RecordingSource rec(src);
    Loader plain(comm, src, options_of(batch, rem, false));
    Loader two(comm, rec, options_of(batch, rem, true));
    const auto slabs = detail::two_phase_slabs(comm, src, src.num_samples());
    const auto r = static_cast<std::size_t>(comm.rank());
    rec.calls.clear();  // construction reads samples of other shards to compare the files
    for (std::uint64_t e = 0; e < 2; ++e) {
        const std::string what =
            "B=" + std::to_string(batch) + " " + to_string(rem) + " epoch " + std::to_string(e);
        tier_test::Yield yp;
        tier_test::Yield yt;
        const auto want = epoch_hashes(plain, e, yp);
        const auto got = epoch_hashes(two, e, yt);
        EXPECT_EQ(got, want) << what << ": two-phase batches differ from the plain reads";
        tier_test::expect_exactly_once(two, yt, src.num_samples(), rem != Remainder::drop, what);
    }
    std::uint64_t ids_read = 0;
    for (const auto& call : rec.calls) {
        EXPECT_TRUE(std::is_sorted(call.begin(), call.end()));
        for (const std::uint64_t id : call) {
            EXPECT_TRUE(id >= slabs[r] && id < slabs[r + 1]) << id << " outside slab " << r;
        }
        ids_read += call.size();
    }
    // Every real slot of both epochs was read by exactly one rank.
    EXPECT_EQ(h5t::sum(ids_read),
              2 * two.totals().steps * batch * comm.size() -
                  (rem == Remainder::mask ? 2 * two.totals().padding_slots : 0));
    EXPECT_EQ(rec.calls.size(), 2 * two.totals().steps);  // one read call per step
    comm.free();
}

}  // namespace

TEST(TwoPhaseLoader, Hdf5BatchesEqualPlainGlobalReads) {
    h5t::TempDir dir;
    ASSERT_TRUE(h5t::make_generated_file(dir.file("g.h5"), 233, false));
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, dir.file("g.h5"), Hdf5Options{{"images", "labels"}});
    compare_with_plain(src, 8, Remainder::mask);
    compare_with_plain(src, 5, Remainder::drop);
    src.close();
    comm.free();
}

TEST(TwoPhaseLoader, TfRecordExampleBatchesEqualPlainGlobalReads) {
    h5t::TempDir dir;
    tier_test::write_records(dir.file("ex.tfrecord"), 171, tier_test::example);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("ex.tfrecord")}, two_phase_test::example_features());
    compare_with_plain(src, 6, Remainder::pad);
    src.close();
    comm.free();
}

TEST(TwoPhaseLoader, ReadErrorOnOneRankIsTheSameErrorEverywhere) {
    h5t::TempDir dir;
    tier_test::write_records(dir.file("e.tfrecord"), 120, tier_test::payload);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("e.tfrecord")});
    two_phase_test::RecordingSource rec(src);
    Loader loader(comm, rec, options_of(3, Remainder::mask, true));
    // One read call per step from here: the last rank fails at step 1 of epoch 0.
    rec.fail = comm.rank() == comm.size() - 1;
    rec.fail_call = rec.calls.size() + 1;
    // One rank: no "[rank 0] " prefix (nothing to tell apart).
    const std::string who =
        comm.size() > 1 ? "[rank " + std::to_string(comm.size() - 1) + "] " : std::string();
    H5T_EXPECT_SAME_ERROR(IoError,
                          for (const HostBatch& b
                               : loader.epoch(0))(void) b,
                          who + "injected read error");
    // The loader is usable again after the agreed error.
    rec.fail = false;
    tier_test::Yield y;
    (void)epoch_hashes(loader, 1, y);
    tier_test::expect_exactly_once(loader, y, 120, true, "epoch after the error");
    comm.free();
}

TEST(TwoPhaseLoader, RefusedOutsideGlobalShardingWithoutStaging) {
    h5t::TempDir dir;
    tier_test::write_records(dir.file("c.tfrecord"), 40, tier_test::payload);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("c.tfrecord")});
    LoaderOptions byte_range = options_of(4, Remainder::pad, true);
    byte_range.plan.sharding = Sharding::byte_range;
    byte_range.plan.shuffle = Shuffle::local;
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, byte_range), "two-phase",
                          "global sharding");
    LoaderOptions staged = options_of(4, Remainder::pad, true);
    staged.tier.stage = Stage::memory;
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, staged), "two-phase", "stage none");
    if (h5t::size() > 1) {  // same condition on every rank
        LoaderOptions mixed = options_of(4, Remainder::pad, h5t::rank() == 1);
        H5T_EXPECT_SAME_ERROR(ConfigError, Loader(comm, src, mixed), "two_phase");
    }
    src.close();
    comm.free();
}
