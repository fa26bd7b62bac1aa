// The CPU fallback of the staging pipeline: batches in order with their bytes, slots reused,
// back-pressure, batches outliving the next ones, producer errors, shutdown with batches held.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "mpistage/error.hpp"
#include "stage_test_util.hpp"

using namespace mpistage;
using namespace mpistage::detail;
using namespace stage_test;

namespace {

constexpr std::uint64_t kSeed = 0xC0FFEEull;
constexpr std::size_t kSlotBytes = 3000;

FillFunction pattern_fill() {
    return [](std::uint64_t step, std::byte* data, std::size_t capacity) {
        return fill_pattern(kSeed, step, data, capacity);
    };
}

void expect_batch(const PipelineBatch& b, std::uint64_t step) {
    EXPECT_EQ(b.step, step);
    ASSERT_EQ(b.size_bytes, step_bytes(step, kSlotBytes));
    EXPECT_EQ(first_mismatch(kSeed, step, b.data, b.size_bytes), b.size_bytes) << "step " << step;
}

}  // namespace

TEST(StagePipelineCpu, EveryStepInOrderWithItsBytesAndSlotsReused) {
    StagePipeline p(pipeline_options(DeviceChoice{}, 3, kSlotBytes), 40, pattern_fill());
    std::set<const std::byte*> addresses;
    PipelineBatch b;
    for (std::uint64_t step = 0; step < 40; ++step) {
        ASSERT_TRUE(p.next(b));
        expect_batch(b, step);
        addresses.insert(b.data);
    }
    EXPECT_FALSE(p.next(b));
    EXPECT_FALSE(p.next(b));
    EXPECT_EQ(p.ring().slots(), 3u);
    EXPECT_LE(addresses.size(), 3u);  // zero-copy: the batch is its slot, and slots recycle
    EXPECT_FALSE(p.ring().pinned());
    EXPECT_EQ(p.stats().batches, 40u);
    EXPECT_EQ(p.stats().bytes_copied, 0u);  // the CPU path copies nothing
}

TEST(StagePipelineCpu, ProducerNeverRunsMoreThanTheRingAhead) {
    std::atomic<std::uint64_t> consumed{0};
    std::atomic<std::uint64_t> max_ahead{0};
    FillFunction fill = [&](std::uint64_t step, std::byte* data, std::size_t capacity) {
        const std::uint64_t ahead = step - consumed.load();
        std::uint64_t seen = max_ahead.load();
        while (ahead > seen && !max_ahead.compare_exchange_weak(seen, ahead)) {
        }
        return fill_pattern(kSeed, step, data, capacity);
    };
    StagePipeline p(pipeline_options(DeviceChoice{}, 3, kSlotBytes), 30, fill);
    PipelineBatch b;
    for (std::uint64_t step = 0; step < 30; ++step) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // slow consumer
        ASSERT_TRUE(p.next(b));
        expect_batch(b, step);
        consumed = step + 1;
    }
    // 3 slots: the producer fills step s only once the batch s - 3 was released, which
    // happens inside the consumer's next() for step s - 2, so s - consumed <= 2.
    EXPECT_LE(max_ahead.load(), 2u);
    EXPECT_GE(max_ahead.load(), 1u);
}

TEST(StagePipelineCpu, KeptBatchesStayValidAfterLaterOnes) {
    StagePipeline p(pipeline_options(DeviceChoice{}, 4, kSlotBytes), 12, pattern_fill());
    std::vector<PipelineBatch> kept(2);
    ASSERT_TRUE(p.next(kept[0]));
    ASSERT_TRUE(p.next(kept[1]));
    PipelineBatch b;
    for (std::uint64_t step = 2; step < 12; ++step) {
        ASSERT_TRUE(p.next(b));
        expect_batch(b, step);
    }
    expect_batch(kept[0], 0);
    expect_batch(kept[1], 1);
}

TEST(StagePipelineCpu, HoldingEverySlotIsAnErrorNotAHang) {
    StagePipeline p(pipeline_options(DeviceChoice{}, 2, kSlotBytes), 10, pattern_fill());
    std::vector<PipelineBatch> kept(2);
    ASSERT_TRUE(p.next(kept[0]));
    ASSERT_TRUE(p.next(kept[1]));
    PipelineBatch b;
    try {
        p.next(b);
        ADD_FAILURE() << "next() returned with every slot held";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("all 2 ring slots"), std::string::npos) << e.what();
    }
    kept[0] = PipelineBatch();  // one slot back: the pipeline goes on
    ASSERT_TRUE(p.next(b));
    expect_batch(b, 2);
}

TEST(StagePipelineCpu, ProducerErrorReachesTheConsumerAfterEarlierBatches) {
    FillFunction fill = [](std::uint64_t step, std::byte* data, std::size_t capacity) {
        if (step == 5) throw IoError("stage test: read of step 5 failed");
        return fill_pattern(kSeed, step, data, capacity);
    };
    StagePipeline p(pipeline_options(DeviceChoice{}, 3, kSlotBytes), 10, fill);
    PipelineBatch b;
    for (std::uint64_t step = 0; step < 5; ++step) {
        ASSERT_TRUE(p.next(b));
        expect_batch(b, step);
    }
    for (int again = 0; again < 2; ++again) {
        try {
            p.next(b);
            ADD_FAILURE() << "the producer's error was not rethrown";
        } catch (const IoError& e) {
            EXPECT_STREQ(e.what(), "stage test: read of step 5 failed");
        }
    }
}

TEST(StagePipelineCpu, OverfullSlotIsAnError) {
    FillFunction fill = [](std::uint64_t, std::byte*, std::size_t capacity) {
        return capacity + 1;
    };
    StagePipeline p(pipeline_options(DeviceChoice{}, 2, kSlotBytes), 3, fill);
    PipelineBatch b;
    EXPECT_THROW(p.next(b), ConfigError);
}

TEST(StagePipelineCpu, ShutdownWithBatchesHeldAndProducerBlocked) {
    std::vector<PipelineBatch> kept(2);
    std::atomic<std::uint64_t> filled{0};
    FillFunction fill = [&](std::uint64_t step, std::byte* data, std::size_t capacity) {
        ++filled;
        return fill_pattern(kSeed, step, data, capacity);
    };
    {
        StagePipeline p(pipeline_options(DeviceChoice{}, 3, kSlotBytes), 1000, fill);
        ASSERT_TRUE(p.next(kept[0]));
        ASSERT_TRUE(p.next(kept[1]));
        while (filled.load() < 3) std::this_thread::yield();
    }  // producer blocked on a full ring, one batch pending in the stager
    EXPECT_LT(filled.load(), 10u);
    expect_batch(kept[0], 0);
    expect_batch(kept[1], 1);
    kept.clear();  // the slots return to a ring whose pipeline is gone
}

TEST(StagePipelineCpu, ShutdownWhileTheProducerIsFilling) {
    std::atomic<bool> in_fill{false};
    std::atomic<int> fills{0};
    FillFunction fill = [&](std::uint64_t step, std::byte* data, std::size_t capacity) {
        in_fill = true;
        ++fills;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return fill_pattern(kSeed, step, data, capacity);
    };
    auto p =
        std::make_unique<StagePipeline>(pipeline_options(DeviceChoice{}, 2, kSlotBytes), 100, fill);
    while (!in_fill.load()) std::this_thread::yield();
    p.reset();  // joins the producer after its current fill
    const int after = fills.load();
    EXPECT_LE(after, 2);  // two slots, no consumer: the producer stopped at the full ring
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    EXPECT_EQ(fills.load(), after);  // nothing runs after destruction
}

TEST(StageStagerCpu, ZeroCopyInOrderAndBounded) {
    StagerOptions o;
    o.depth = 2;
    DeviceStager s(o);
    std::vector<std::byte> a(100, std::byte{1});
    std::vector<std::byte> b(50, std::byte{2});
    auto lease = std::make_shared<int>(7);
    std::weak_ptr<int> weak = lease;
    s.submit({{a.data(), a.size()}, {b.data(), b.size()}}, lease);
    s.submit({{b.data(), b.size()}}, nullptr);
    EXPECT_THROW(s.submit({{a.data(), a.size()}}, nullptr), ConfigError);
    lease.reset();
    EXPECT_FALSE(weak.expired());  // the pending batch holds its host memory
    StagedBatch first;
    ASSERT_TRUE(s.take(first));
    EXPECT_EQ(first.sequence, 0u);
    ASSERT_EQ(first.parts.size(), 2u);
    EXPECT_EQ(first.parts[0], a.data());
    EXPECT_EQ(first.parts[1], b.data());
    EXPECT_EQ(first.sizes[0], 100u);
    EXPECT_FALSE(first.device.cuda);
    EXPECT_FALSE(weak.expired());  // on the CPU the batch is the host memory
    first = StagedBatch();
    EXPECT_TRUE(weak.expired());
    StagedBatch second;
    ASSERT_TRUE(s.take(second));
    EXPECT_EQ(second.sequence, 1u);
    EXPECT_FALSE(s.take(second));
    EXPECT_EQ(s.stats().batches, 2u);
    EXPECT_EQ(s.stats().h2d_gbps(), 0.0);
}

TEST(StageStagerCpu, OptionsAreValidated) {
    StagerOptions o;
    o.depth = 0;
    EXPECT_THROW(DeviceStager{o}, ConfigError);
    o.depth = 65;
    EXPECT_THROW(DeviceStager{o}, ConfigError);
    o.depth = 3;
    o.pool_buffers = 3;
    EXPECT_THROW(DeviceStager{o}, ConfigError);
    o.pool_buffers = 4;
    EXPECT_NO_THROW(DeviceStager{o});
}
