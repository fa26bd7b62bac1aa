// The Loader with a batch budget (PlanOptions::budget) at 1-4 ranks: budget-sized batches of a
// generated TFRecord file with
// heavy-tailed record sizes and of an HDF5 file. Payloads are checked against the generators
// (independent of mpistage), every sample exactly once, equal steps on every rank, every batch
// within budget or one flagged oversize sample, and a read error on one rank is the same
// exception on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "../tfrecord_test_util.hpp"
#include "budget_test_util.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/framing.hpp"

namespace {

using namespace mpistage;

using budget_test::kRecords;
using budget_test::payload_byte;
using budget_test::record_length;
using budget_test::write_variable_tfrecord;

/// What one rank saw in an epoch.
struct Seen {
    std::vector<int> count;
    std::uint64_t steps = 0;
    std::uint64_t oversize = 0;
    std::uint64_t bad_payload = 0;
    std::uint64_t over_budget = 0;
    std::uint64_t empty_valid = 0;
};

/// Collective: exactly once and equal steps over all ranks.
void expect_exactly_once_equal_steps(const Communicator& comm, const Seen& s) {
    std::vector<int> total(s.count.size(), 0);
    MPI_Allreduce(s.count.data(), total.data(), static_cast<int>(total.size()), MPI_INT, MPI_SUM,
                  comm.get());
    EXPECT_EQ(std::count(total.begin(), total.end(), 1), static_cast<long>(total.size()))
        << "samples not yielded exactly once";
    EXPECT_EQ(comm.allreduce_min(s.steps), comm.allreduce_max(s.steps)) << "unequal steps";
}

Seen run_tfrecord_epoch(const Communicator& comm, Loader& loader, std::uint64_t epoch,
                        std::uint64_t budget, EpochPlan& plan) {
    Seen s;
    s.count.assign(kRecords, 0);
    EpochRange range = loader.epoch(epoch);
    plan = range.plan();
    for (const HostBatch& b : range) {
        ++s.steps;
        const bool last_oversize = range.plan().batch_oversize(b.step());
        s.oversize += last_oversize ? 1 : 0;
        EXPECT_GE(b.size(), 1u);
        const HostField& f = b.fields().at(0);
        std::uint64_t bytes = 0;
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (!b.valid()[j]) {
                s.empty_valid += f.offsets[j + 1] != f.offsets[j] ? 1 : 0;
                continue;
            }
            const auto id = static_cast<std::uint64_t>(b.index()[j]);
            ++s.count.at(id);
            const std::int64_t len = f.offsets[j + 1] - f.offsets[j];
            bytes += static_cast<std::uint64_t>(len);
            bool ok = static_cast<std::uint64_t>(len) == record_length(id);
            for (std::int64_t k = 0; ok && k < len; ++k) {
                ok = static_cast<std::uint8_t>(f.data[f.offsets[j] + k]) ==
                     payload_byte(id, static_cast<std::uint64_t>(k));
            }
            s.bad_payload += ok ? 0 : 1;
        }
        const bool single_over = b.num_valid() == 1 && bytes > budget;
        s.over_budget += bytes > budget && !single_over ? 1 : 0;
        EXPECT_EQ(last_oversize, single_over);
    }
    (void)comm;
    return s;
}

TEST(LoaderBudget, TfRecordHeavyTailedBudgetExactlyOnceEqualSteps) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = write_variable_tfrecord(comm);
    TfRecordSource src(comm, {path});
    ASSERT_EQ(src.num_samples(), kRecords);
    for (const Sharding sharding : {Sharding::byte_range, Sharding::global}) {
        LoaderOptions o;
        o.plan.sharding = sharding;
        o.plan.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
        o.plan.seed = 5;
        o.plan.budget.batch_bytes = 16384;
        o.plan.budget.bucket_window = sharding == Sharding::global ? 4 : 0;
        o.delivery.pin_memory = false;
        Loader loader(comm, src, o);
        for (std::uint64_t epoch : {0u, 1u}) {
            EpochPlan plan;
            const Seen s = run_tfrecord_epoch(comm, loader, epoch, o.plan.budget.batch_bytes, plan);
            expect_exactly_once_equal_steps(comm, s);
            EXPECT_EQ(s.bad_payload, 0u);
            EXPECT_EQ(s.over_budget, 0u);
            EXPECT_EQ(s.empty_valid, 0u) << "a padding slot carries data";
            EXPECT_EQ(s.steps, plan.steps);
            // The generator's lengths give the oversize count independently.
            std::uint64_t over = 0;
            for (std::uint64_t i = 0; i < kRecords; ++i) over += record_length(i) > 16384 ? 1 : 0;
            EXPECT_EQ(comm.allreduce_sum(s.oversize), over);
            EXPECT_EQ(plan.budget.oversize_batches, over);
        }
        EXPECT_EQ(
            comm.allreduce_sum(loader.stats().oversize_batches), 2 * [] {
                std::uint64_t over = 0;
                for (std::uint64_t i = 0; i < kRecords; ++i)
                    over += record_length(i) > 16384 ? 1 : 0;
                return over;
            }());
        EXPECT_EQ(comm.allreduce_sum(loader.stats().valid_samples), 2 * kRecords);
    }
    src.close();
    comm.free();
}

TEST(LoaderBudget, TfRecordTokenBudget) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string path = write_variable_tfrecord(comm);
    TfRecordSource src(comm, {path});
    LoaderOptions o;
    o.plan.budget.batch_tokens = 20000;  // uint8 payload: one token per byte
    o.delivery.pin_memory = false;
    Loader loader(comm, src, o);
    EpochRange range = loader.epoch(0);
    std::vector<int> count(kRecords, 0);
    std::uint64_t steps = 0;
    std::uint64_t over = 0;
    HostBatch b;
    while (range.next(b)) {
        ++steps;
        std::uint64_t longest = 0;
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (!b.valid()[j]) continue;
            ++count.at(static_cast<std::size_t>(b.index()[j]));
            longest = std::max(longest, record_length(static_cast<std::uint64_t>(b.index()[j])));
        }
        const bool fits = longest * b.num_valid() <= 20000;
        over += !fits && !(b.num_valid() == 1 && range.plan().batch_oversize(b.step())) ? 1 : 0;
    }
    EXPECT_EQ(over, 0u) << "batches over the token budget";
    std::vector<int> total(kRecords, 0);
    MPI_Allreduce(count.data(), total.data(), static_cast<int>(kRecords), MPI_INT, MPI_SUM,
                  comm.get());
    EXPECT_EQ(std::count(total.begin(), total.end(), 1), static_cast<long>(kRecords));
    EXPECT_EQ(comm.allreduce_min(steps), comm.allreduce_max(steps));
    src.close();
    comm.free();
}

TEST(LoaderBudget, Hdf5FixedFieldsBatchesOfWhatFits) {
    const std::string path = h5t::shared_files().generated_contiguous;
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options h5;
    h5.fields = {"images", "labels"};
    Hdf5Source src(comm, path, h5);
    LoaderOptions o;
    o.plan.shuffle = Shuffle::local;
    o.plan.budget.batch_bytes = 5000;  // 784 image bytes + 8 label bytes per sample: 6 fit
    o.delivery.pin_memory = false;
    Loader loader(comm, src, o);
    EpochRange range = loader.epoch(3);
    std::vector<int> count(h5t::kGeneratedRows, 0);
    std::uint64_t steps = 0, bad = 0, too_many = 0;
    HostBatch b;
    while (range.next(b)) {
        ++steps;
        too_many += b.num_valid() > 5000 / (h5t::kPixels + 8) ? 1 : 0;
        const HostField* images = nullptr;
        const HostField* labels = nullptr;
        for (const HostField& f : b.fields()) {
            if (f.info->name == "images") images = &f;
            if (f.info->name == "labels") labels = &f;
        }
        ASSERT_TRUE(images != nullptr && labels != nullptr);  // same fields on every rank
        const auto* img = images->as<std::uint8_t>();
        const auto* lab = labels->as<std::int64_t>();
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (!b.valid()[j]) continue;
            const auto id = static_cast<std::uint64_t>(b.index()[j]);
            ++count.at(id);
            bad += lab[j] != h5t::gen_label(id) ? 1 : 0;
            for (std::size_t k = 0; k < h5t::kPixels; ++k) {
                if (img[j * h5t::kPixels + k] != h5t::gen_pixel(id, k)) {
                    ++bad;
                    break;
                }
            }
        }
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(too_many, 0u);
    std::vector<int> total(count.size(), 0);
    MPI_Allreduce(count.data(), total.data(), static_cast<int>(count.size()), MPI_INT, MPI_SUM,
                  comm.get());
    EXPECT_EQ(std::count(total.begin(), total.end(), 1), static_cast<long>(count.size()));
    EXPECT_EQ(comm.allreduce_min(steps), comm.allreduce_max(steps));
    src.close();
    comm.free();
}

/// Eight fixed bytes per sample whose size (for the budget) grows with the id; reading
/// sample `bad_id` fails.
class FailingSource final : public Source {
public:
    explicit FailingSource(std::uint64_t bad_id) : bad_(bad_id) {
        fields_.push_back(FieldInfo{"x", DType::uint8, {8}, 8, false});
    }
    const std::vector<FieldInfo>& fields() const override { return fields_; }
    std::uint64_t num_samples() const override { return 90; }
    std::uint64_t records_in_cut(int rank, int w) const override {
        return fixed_records_in_cut(90, 8, rank, w);
    }
    std::string fingerprint() const override { return "failing-90"; }
    std::uint64_t sample_bytes(std::uint64_t id) const override { return 8 + id; }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        for (std::size_t k = 0; k < count; ++k) {
            if (armed_ && ids[k] == bad_) {
                throw IoError("failing source: sample " + std::to_string(bad_));
            }
            std::memset(sink.fixed(0, k), static_cast<int>(ids[k]), 8);
        }
    }

    /// Reads of `bad_id` fail while armed (the loader's construction reads samples for the
    /// dataset fingerprint; the failure is meant for an epoch's reads).
    void arm(bool on) const { armed_ = on; }

private:
    std::uint64_t bad_;
    std::vector<FieldInfo> fields_;
    mutable bool armed_ = false;
};

TEST(LoaderBudget, ReadErrorOnOneRankIsTheSameErrorEverywhere) {
    Communicator comm(MPI_COMM_WORLD);
    FailingSource src(77);  // in the last rank's shard at every world size
    for (const std::size_t threads : {std::size_t{0}, std::size_t{2}}) {
        LoaderOptions o;
        o.plan.budget.batch_bytes = 64;
        o.pipeline.io_threads = threads;
        o.pipeline.prefetch = 3;
        o.delivery.pin_memory = false;
        src.arm(false);
        Loader loader(comm, src, o);
        src.arm(true);
        tfrecord_test::expect_agreed_error(comm,
                                           [&] {
                                               EpochRange range = loader.epoch(0);
                                               HostBatch b;
                                               while (range.next(b)) {
                                               }
                                           },
                                           ErrorKind::io, {"failing source: sample 77"});
    }
    comm.free();
}

TEST(LoaderBudget, DifferentBudgetsOnRanksAreAConfigError) {
    Communicator comm(MPI_COMM_WORLD);
    FailingSource src(1000);
    LoaderOptions o;
    o.plan.budget.batch_bytes = 64 + static_cast<std::uint64_t>(comm.rank());
    o.delivery.pin_memory = false;
    if (comm.size() > 1) {
        tfrecord_test::expect_agreed_error(comm, [&] { Loader loader(comm, src, o); },
                                           ErrorKind::config,
                                           {"options differ across ranks",
                                            "plan.budget.batch_bytes is '64' on rank 0 but '65' "
                                            "on rank 1"});
    }
    // An unusable budget: the same ConfigError everywhere (no budget at all is fixed batches).
    LoaderOptions none;
    none.plan.budget.batch_bytes = 64;
    none.plan.budget.max_batch_samples = 0;
    tfrecord_test::expect_agreed_error(comm, [&] { Loader loader(comm, src, none); },
                                       ErrorKind::config, {"--max-batch-samples"});
    LoaderOptions tokens;  // a token budget needs a ragged token field; this source has none
    tokens.plan.budget.batch_tokens = 64;
    tfrecord_test::expect_agreed_error(comm, [&] { Loader loader(comm, src, tokens); },
                                       ErrorKind::config, {"not a ragged field"});
    LoaderOptions two_phase;
    two_phase.plan.budget.batch_bytes = 64;
    two_phase.plan.sharding = Sharding::global;
    two_phase.pipeline.two_phase = TwoPhase::on;
    tfrecord_test::expect_agreed_error(comm, [&] { Loader loader(comm, src, two_phase); },
                                       ErrorKind::config, {"two-phase", "budget"});
    comm.free();
}

}  // namespace
