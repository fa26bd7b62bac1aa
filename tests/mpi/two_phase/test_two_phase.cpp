// Two-phase reads (issue 9: global shuffles without staging): each rank reads only its slab's
// samples of a step, in ascending order, and one exchange per step delivers them. Checked on
// generated HDF5 (fixed fields) and TFRecord (ragged payloads, decoded Examples) files: equal
// steps, exactly once, every batch equal (ids and bytes) to the direct read of the same global
// plan and every sample equal to its generator; a read error or a missing slot on one rank is
// the same error on every rank at the same step, without a hang.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>

#include "../tier/tier_test_util.hpp"
#include "h5t_files.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "two_phase_test_util.hpp"

using namespace mpistage;
using namespace two_phase_test;

namespace {

struct Case {
    std::uint64_t batch;
    Remainder remainder;
    Shuffle shuffle;
    bool balance;
};

const std::vector<Case> kCases = {
    {5, Remainder::drop, Shuffle::global, false}, {16, Remainder::mask, Shuffle::global, false},
    {7, Remainder::pad, Shuffle::global, false},  {9, Remainder::mask, Shuffle::none, false},
    {6, Remainder::pad, Shuffle::global, true},
};

PlanOptions options_of(const Case& c) {
    PlanOptions o;
    o.batch_size = c.batch;
    o.remainder = c.remainder;
    o.sharding = Sharding::global;
    o.shuffle = c.shuffle;
    o.balance_steps = c.balance;
    o.seed = 1234;
    return o;
}

std::string describe(const Case& c, std::uint64_t e) {
    return "B=" + std::to_string(c.batch) + " " + to_string(c.remainder) + " " +
           to_string(c.shuffle) + (c.balance ? " balanced" : "") + " epoch " + std::to_string(e) +
           " W=" + std::to_string(h5t::size());
}

/// Every case, two epochs each.
void sweep(const Source& src, const SlotTruth& truth) {
    Communicator comm(MPI_COMM_WORLD);
    RecordingSource rec(src);
    for (const Case& c : kCases) {
        const PlanOptions o = options_of(c);
        for (std::uint64_t e = 0; e < 2; ++e) {
            const EpochYield y = two_phase_epoch(comm, rec, src, o, e, truth);
            expect_clean_epoch(y, plan_totals(src.num_samples(), comm.size(), o), describe(c, e));
        }
    }
    comm.free();
}

/// Slot `j` of the generated HDF5 file's `images` (uint8 28×28) and `labels` (int64).
bool hdf5_truth(const detail::Slot& slot, std::size_t j, std::uint64_t id) {
    for (std::size_t k = 0; k < h5t::kPixels; ++k) {
        if (static_cast<std::uint8_t>(slot.field_data[0][j * h5t::kPixels + k]) !=
            h5t::gen_pixel(id, k)) {
            return false;
        }
    }
    std::int64_t label = 0;
    std::memcpy(&label, slot.field_data[1] + j * 8, 8);
    return label == h5t::gen_label(id);
}

/// Ragged field `f` of `slot` at position `j` holds exactly `tier_test::payload(id)`.
bool ragged_truth(const detail::Slot& slot, std::size_t f, std::size_t j, std::uint64_t id) {
    const auto want = tier_test::payload(id);
    const auto& off = slot.ragged_offsets[f];
    const auto len = static_cast<std::size_t>(off[j + 1] - off[j]);
    return len == want.size() &&
           (len == 0 || std::memcmp(slot.ragged_values[f].data() + off[j], want.data(), len) == 0);
}

}  // namespace

TEST(TwoPhase, Hdf5ContiguousAndChunkedEqualDirectReadsAndGenerator) {
    h5t::TempDir dir;
    for (const bool chunked : {false, true}) {
        const std::string path = dir.file(chunked ? "gz.h5" : "plain.h5");
        ASSERT_TRUE(h5t::make_generated_file(path, 211, chunked));
        Communicator comm(MPI_COMM_WORLD);
        Hdf5Source src(comm, path, Hdf5Options{{"images", "labels"}});
        sweep(src, hdf5_truth);
        src.close();
        comm.free();
    }
}

// Fewer samples than ranks at W = 3, 4: empty slabs and padding-only batches.
TEST(TwoPhase, FewerSamplesThanRanksLeaveSlabsEmpty) {
    h5t::TempDir dir;
    ASSERT_TRUE(h5t::make_generated_file(dir.file("tiny.h5"), 2, false));
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, dir.file("tiny.h5"), Hdf5Options{{"images", "labels"}});
    RecordingSource rec(src);
    for (const Remainder rem : {Remainder::mask, Remainder::pad}) {
        PlanOptions o = options_of({1, rem, Shuffle::global, false});
        const EpochYield y = two_phase_epoch(comm, rec, src, o, 0, hdf5_truth);
        expect_clean_epoch(y, plan_totals(2, comm.size(), o), "N=2 " + to_string(rem));
    }
    src.close();
    comm.free();
}

TEST(TwoPhase, RaggedTfRecordPayloadsEqualDirectReadsAndGenerator) {
    h5t::TempDir dir;
    tier_test::write_records(dir.file("raw.tfrecord"), 203, tier_test::payload);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("raw.tfrecord")});
    ASSERT_EQ(src.num_samples(), 203u);
    sweep(src, [](const detail::Slot& slot, std::size_t j, std::uint64_t id) {
        return ragged_truth(slot, 0, j, id);
    });
    src.close();
    comm.free();
}

TEST(TwoPhase, DecodedExampleFieldsEqualDirectReadsAndGenerator) {
    h5t::TempDir dir;
    tier_test::write_records(dir.file("ex.tfrecord"), 171, tier_test::example);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("ex.tfrecord")}, two_phase_test::example_features());
    ASSERT_EQ(src.fields().size(), 3u);
    sweep(src, [](const detail::Slot& slot, std::size_t j, std::uint64_t id) {
        std::int64_t label = 0;
        std::memcpy(&label, slot.field_data[1] + j * 8, 8);
        return std::memcmp(slot.field_data[0] + j * 4, tier_test::image_of(id).data(), 4) == 0 &&
               label == static_cast<std::int64_t>(id) * 1000 - 5 && ragged_truth(slot, 2, j, id);
    });
    src.close();
    comm.free();
}

// The slabs follow the bytes: with records of very different sizes, every slab holds about
// T/W bytes (within one record), not N/W records.
TEST(TwoPhase, SlabsAreByteBalancedForVariableRecords) {
    h5t::TempDir dir;
    constexpr std::uint64_t n = 300;
    const auto make = [](std::uint64_t id) {
        return std::vector<std::uint8_t>(id < 100 ? 1000 : 10, static_cast<std::uint8_t>(id));
    };
    tier_test::write_records(dir.file("skew.tfrecord"), n, make);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("skew.tfrecord")});
    const auto slabs = detail::two_phase_slabs(comm, src, n);
    ASSERT_EQ(slabs.size(), static_cast<std::size_t>(comm.size()) + 1);
    std::uint64_t total = 0;
    for (std::uint64_t id = 0; id < n; ++id) total += make(id).size() + 16;  // 16 framing bytes
    const std::uint64_t largest = 1000 + 16;
    for (int r = 0; r < comm.size(); ++r) {
        std::uint64_t bytes = 0;
        for (std::uint64_t id = slabs[r]; id < slabs[r + 1]; ++id) bytes += make(id).size() + 16;
        EXPECT_LE(bytes, total / comm.size() + largest) << "slab " << r;
        EXPECT_GE(bytes + largest, total / comm.size()) << "slab " << r;
    }
    src.close();
    comm.free();
}

// A read error on the last rank at its second step: every rank throws the same IoError (the
// injected text, prefixed with the failing rank) at the same step; nobody hangs.
TEST(TwoPhase, ReadErrorOnOneRankIsTheSameErrorEverywhere) {
    h5t::TempDir dir;
    tier_test::write_records(dir.file("e.tfrecord"), 150, tier_test::payload);
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {dir.file("e.tfrecord")});
    RecordingSource rec(src);
    rec.fail = comm.rank() == comm.size() - 1;
    rec.fail_call = 1;  // one read call per step: fails at step 1
    const PlanOptions o = options_of({4, Remainder::pad, Shuffle::global, false});
    const auto any = [](const detail::Slot&, std::size_t, std::uint64_t) { return true; };
    const EpochYield y = two_phase_epoch(comm, rec, src, o, 0, any);
    EXPECT_EQ(y.steps, 1u);
    EXPECT_EQ(y.error_kind, static_cast<int>(ErrorKind::io));
    // One rank: no "[rank 0] " prefix (nothing to tell apart).
    const std::string who =
        comm.size() > 1 ? "[rank " + std::to_string(comm.size() - 1) + "] " : std::string();
    EXPECT_NE(y.error.find(who + "injected read error"), std::string::npos) << y.error;
    EXPECT_TRUE(h5t::same_on_all_ranks(h5t::fnv(y.error))) << y.error;
    src.close();
    comm.free();
}

// No free slot on rank 0 at step 2 (the caller holds them all): the other ranks still get
// their exchange partner, and everyone throws rank 0's error at that step.
TEST(TwoPhase, MissingSlotOnOneRankIsTheSameErrorEverywhere) {
    h5t::TempDir dir;
    ASSERT_TRUE(h5t::make_generated_file(dir.file("s.h5"), 97, false));
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, dir.file("s.h5"), Hdf5Options{{"images", "labels"}});
    RecordingSource rec(src);
    const PlanOptions o = options_of({3, Remainder::mask, Shuffle::global, false});
    const bool root = comm.rank() == 0;
    const EpochYield y = two_phase_epoch(comm, rec, src, o, 0, hdf5_truth,
                                         [root](std::uint64_t s) { return root && s == 2; });
    EXPECT_EQ(y.steps, 2u);
    EXPECT_EQ(y.error_kind, static_cast<int>(ErrorKind::config));
    // One rank: no "[rank 0] " prefix (nothing to tell apart).
    const std::string want =
        comm.size() > 1 ? "[rank 0] two-phase: no ring slot" : "two-phase: no ring slot";
    EXPECT_EQ(y.error.rfind(want, 0), 0u) << y.error;
    EXPECT_TRUE(h5t::same_on_all_ranks(h5t::fnv(y.error))) << y.error;
    src.close();
    comm.free();
}
