// The real prefetcher and ring of the loader (src/pipeline): steps arrive in plan order whatever
// the I/O thread count, reads never run further ahead than the ring has slots, a read's error
// reaches the consumer with its step, a caller holding every slot gets a clear error instead of
// a hang, and shutdown with slots held (or reads waiting for a slot) returns.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "pipeline/prefetch.hpp"
#include "pipeline/ring.hpp"

using namespace mpistage;
using detail::Prefetcher;
using detail::Slot;

namespace {

constexpr std::uint64_t kSampleBytes = 8;

/// Sample `id` is 8 bytes, each equal to `id mod 251`. Reads of `fail_id` throw IoError;
/// every read records the highest step read so far (step = id / batch size).
class CountingSource final : public Source {
public:
    CountingSource(std::uint64_t n, std::uint64_t batch_size) : n_(n), b_(batch_size) {
        fields_.push_back({"x", DType::uint8, {kSampleBytes}, kSampleBytes, false});
    }
    const std::vector<FieldInfo>& fields() const override { return fields_; }
    std::uint64_t num_samples() const override { return n_; }
    std::uint64_t records_in_cut(int rank, int world_size) const override {
        return fixed_records_in_cut(n_, kSampleBytes, rank, world_size);
    }
    std::string fingerprint() const override { return "counting:" + std::to_string(n_); }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
        for (std::size_t k = 0; k < count; ++k) {
            std::uint64_t seen = highest_step_.load();
            const std::uint64_t step = ids[k] / b_ + 1;  // 0 = nothing read yet
            while (seen < step && !highest_step_.compare_exchange_weak(seen, step)) {
            }
            if (ids[k] == fail_id_) {
                throw IoError("counting: cannot read sample " + std::to_string(ids[k]));
            }
            std::memset(sink.fixed(0, k), static_cast<int>(ids[k] % 251), kSampleBytes);
        }
    }

    std::uint64_t fail_id_ = ~std::uint64_t{0};
    std::chrono::milliseconds delay_{0};
    /// 1 + the highest step any read touched (0 before the first read).
    mutable std::atomic<std::uint64_t> highest_step_{0};

private:
    std::uint64_t n_;
    std::uint64_t b_;
    std::vector<FieldInfo> fields_;
};

/// Steps × b ids 0, 1, 2, ... in order; the last `padding` slots of the last step are padding.
EpochPlan sequential_plan(std::uint64_t steps, std::uint64_t b, std::uint64_t padding = 0) {
    EpochPlan plan;
    plan.steps = steps;
    plan.batch_size = b;
    for (std::uint64_t i = 0; i < steps * b; ++i) {
        const bool pad = i >= steps * b - padding;
        plan.ids.push_back(pad ? kPaddingId : static_cast<std::int64_t>(i));
        plan.valid.push_back(pad ? 0 : 1);
    }
    return plan;
}

/// The slot holds step `step` of `plan`, with every sample's bytes.
void expect_step(const Slot& slot, const EpochPlan& plan, std::uint64_t step) {
    ASSERT_EQ(slot.step, step);
    const std::uint64_t b = plan.batch_size;
    std::size_t valid = 0;
    for (std::uint64_t j = 0; j < b; ++j) {
        const std::int64_t id = plan.ids[step * b + j];
        EXPECT_EQ(slot.ids[j], id) << "step " << step << " position " << j;
        EXPECT_EQ(slot.valid[j], plan.valid[step * b + j]);
        valid += plan.valid[step * b + j];
        const std::byte want = id < 0 ? std::byte{0} : static_cast<std::byte>(id % 251);
        for (std::uint64_t k = 0; k < kSampleBytes; ++k) {
            EXPECT_EQ(slot.field_data[0][j * kSampleBytes + k], want)
                << "step " << step << " position " << j << " byte " << k;
        }
    }
    EXPECT_EQ(slot.num_valid, valid);
}

/// One epoch of `steps` batches of `b` sequential samples (the last `padding` slots padding)
/// over a CountingSource, a ring of `slots` pageable slots and its prefetcher (not started).
struct Epoch {
    Epoch(std::uint64_t b, std::uint64_t steps, std::size_t slots, std::uint64_t epoch = 0,
          std::uint64_t padding = 0)
        : source(steps * b, b),
          plan(sequential_plan(steps, b, padding)),
          ring(detail::make_ring(source.fields(), b, slots, false)),
          prefetcher(ring, source, plan, epoch) {}
    CountingSource source;
    const EpochPlan plan;
    std::shared_ptr<detail::Ring> ring;
    Prefetcher prefetcher;
};

/// The slot of `step` (nullptr with a test failure when there is none).
Slot* take_ok(Prefetcher& prefetcher, std::uint64_t step) {
    LocalStatus status;
    Slot* slot = prefetcher.take(step, status);
    EXPECT_NE(slot, nullptr) << "step " << step << ": " << status.message;
    EXPECT_FALSE(status.failed) << "step " << step << ": " << status.message;
    return slot;
}

class PrefetchThreads : public ::testing::TestWithParam<std::size_t> {};

}  // namespace

TEST_P(PrefetchThreads, StepsArriveInPlanOrderWithTheirSamples) {
    const std::uint64_t steps = 23;
    Epoch e(5, steps, 3, 7, 3);
    e.prefetcher.start(GetParam());
    for (std::uint64_t step = 0; step < steps; ++step) {
        Slot* slot = take_ok(e.prefetcher, step);
        ASSERT_NE(slot, nullptr);
        expect_step(*slot, e.plan, step);
        e.ring->release(slot);
    }
    e.prefetcher.shutdown();
    EXPECT_EQ(e.ring->free.size(), e.ring->slots.size());
}

TEST_P(PrefetchThreads, ReadsRunAtMostTheRingAhead) {
    const std::uint64_t steps = 12;
    const std::size_t slots = 2;
    Epoch e(2, steps, slots);
    e.prefetcher.start(GetParam());
    for (std::uint64_t step = 0; step < steps; ++step) {
        // Give the I/O threads time to run ahead as far as they can.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        Slot* slot = take_ok(e.prefetcher, step);
        ASSERT_NE(slot, nullptr);
        // Steps [0, step) released: the slots hold at most steps step .. step + slots - 1.
        EXPECT_LE(e.source.highest_step_.load(), step + slots) << "at step " << step;
        EXPECT_GE(e.source.highest_step_.load(), step + 1);
        expect_step(*slot, e.plan, step);
        e.ring->release(slot);
    }
}

TEST_P(PrefetchThreads, AReadErrorReachesTheConsumerWithItsStep) {
    const std::uint64_t b = 4;
    Epoch e(b, 6, 2);
    e.source.fail_id_ = 2 * b + 1;  // step 2
    e.prefetcher.start(GetParam());
    for (std::uint64_t step = 0; step < e.plan.steps; ++step) {
        LocalStatus status;
        Slot* slot = e.prefetcher.take(step, status);
        ASSERT_NE(slot, nullptr);
        EXPECT_EQ(slot->step, step);
        if (step == 2) {
            EXPECT_TRUE(status.failed);
            EXPECT_EQ(status.kind, ErrorKind::io);
            EXPECT_NE(status.message.find("cannot read sample 9"), std::string::npos)
                << status.message;
        } else {
            EXPECT_FALSE(status.failed) << "step " << step << ": " << status.message;
            expect_step(*slot, e.plan, step);
        }
        e.ring->release(slot);
    }
}

TEST_P(PrefetchThreads, HoldingEverySlotIsAnErrorNotAHang) {
    Epoch e(3, 10, 2, 4);
    e.prefetcher.start(GetParam());
    Slot* held0 = take_ok(e.prefetcher, 0);
    Slot* held1 = take_ok(e.prefetcher, 1);
    ASSERT_TRUE(held0 && held1);
    LocalStatus status;
    EXPECT_EQ(e.prefetcher.take(2, status), nullptr);
    EXPECT_TRUE(status.failed);
    EXPECT_EQ(status.kind, ErrorKind::config);
    EXPECT_NE(status.message.find("all 2 prefetch slots are held"), std::string::npos)
        << status.message;
    EXPECT_NE(status.message.find("batch 2 of epoch 4"), std::string::npos) << status.message;
    // Releasing one slot lets the epoch continue from the same step.
    e.ring->release(held0);
    Slot* slot = take_ok(e.prefetcher, 2);
    ASSERT_NE(slot, nullptr);
    expect_step(*slot, e.plan, 2);
    e.ring->release(slot);
    e.ring->release(held1);
}

TEST_P(PrefetchThreads, ShutdownWithSlotsHeldReturnsAndRecyclesTheRest) {
    Epoch e(2, 50, 4);
    e.source.delay_ = std::chrono::milliseconds(1);
    e.prefetcher.start(GetParam());
    Slot* held = take_ok(e.prefetcher, 0);
    ASSERT_NE(held, nullptr);
    // Let the threads fill the other slots and block waiting for a free one.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    e.prefetcher.shutdown();
    e.prefetcher.shutdown();  // idempotent
    {
        // Read-ahead slots went back to the ring; only the caller's slot is out.
        std::lock_guard<std::mutex> lk(e.ring->m);
        EXPECT_EQ(e.ring->free.size(), e.ring->slots.size() - 1);
    }
    // The held slot keeps its batch after the shutdown (a batch may outlive its epoch).
    expect_step(*held, e.plan, 0);
    e.ring->release(held);
    EXPECT_EQ(e.ring->free.size(), e.ring->slots.size());
}

TEST_P(PrefetchThreads, DestructorStopsThreadsWaitingForASlot) {
    const std::uint64_t b = 2;
    CountingSource source(40 * b, b);
    const EpochPlan plan = sequential_plan(40, b);
    auto ring = detail::make_ring(source.fields(), b, 1, false);
    Slot* held = nullptr;
    {
        Prefetcher prefetcher(ring, source, plan, 0);
        prefetcher.start(GetParam());
        held = take_ok(prefetcher, 0);
        ASSERT_NE(held, nullptr);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }  // ~Prefetcher joins threads that wait for the one slot the caller holds
    EXPECT_EQ(source.highest_step_.load(), 1u);  // nothing beyond step 0 could be read
    expect_step(*held, plan, 0);                 // the slot outlives the prefetcher
    ring->release(held);
}

TEST_P(PrefetchThreads, TakeIfReadyNeverWaitsAndKeepsOrder) {
    Epoch e(3, 8, 2);
    e.prefetcher.start(GetParam());
    for (std::uint64_t step = 0; step < e.plan.steps; ++step) {
        LocalStatus status;
        Slot* slot = nullptr;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!slot && std::chrono::steady_clock::now() < deadline) {
            slot = e.prefetcher.take_if_ready(step, status);
            if (!slot) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ASSERT_NE(slot, nullptr) << "step " << step << " never became ready";
        ASSERT_FALSE(status.failed) << status.message;
        expect_step(*slot, e.plan, step);
        e.ring->release(slot);
    }
}

INSTANTIATE_TEST_SUITE_P(IoThreads, PrefetchThreads, ::testing::Values(0, 1, 4),
                         [](const auto& info) { return "threads" + std::to_string(info.param); });

TEST(Ring, SlotsAreSizedForTheBatchAndRecycled) {
    const std::vector<FieldInfo> fields = {{"a", DType::uint8, {3}, 3, false},
                                           {"r", DType::uint8, {}, 0, true},
                                           {"b", DType::float32, {2}, 8, false}};
    // 64-byte aligned fixed fields ([5,3] -> 64, [5,2] f32 -> 64), then 5 ids and 5 flags.
    EXPECT_EQ(detail::slot_bytes(fields, 5), 64u + 64u + 5 * 8 + 5);
    auto ring = detail::make_ring(fields, 5, 3, false);
    ASSERT_EQ(ring->slots.size(), 3u);
    EXPECT_EQ(detail::ring_bytes(*ring), 3 * detail::slot_bytes(fields, 5));
    const Slot& s = *ring->slots[0];
    EXPECT_EQ(s.field_data[1], nullptr);  // ragged: values live in ragged_values
    EXPECT_EQ(s.field_data[2] - s.field_data[0], 64);
    std::vector<Slot*> taken;
    while (Slot* t = ring->try_take()) taken.push_back(t);
    EXPECT_EQ(taken.size(), 3u);
    ring->release(taken[1]);
    EXPECT_EQ(ring->try_take(), taken[1]);
    EXPECT_THROW(detail::slot_bytes({{"huge", DType::uint8, {}, ~std::uint64_t{0} / 2, false}}, 4),
                 ConfigError);
}
