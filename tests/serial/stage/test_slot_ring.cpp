// The stage component's host ring: allocated once, slots reused, back-pressure, shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "mpistage/error.hpp"
#include "stage/slot_ring.hpp"

using mpistage::detail::HostSlot;
using mpistage::detail::HostSlotRing;

TEST(StageRing, SlotsAreReusedNotReallocated) {
    auto ring = HostSlotRing::create(3, 4096, false);
    std::set<const std::byte*> seen;
    for (int round = 0; round < 20; ++round) {
        auto a = ring->try_acquire();
        auto b = ring->try_acquire();
        ASSERT_TRUE(a && b);
        seen.insert(a->block.data());
        seen.insert(b->block.data());
        EXPECT_EQ(a->block.size_bytes(), 4096u);
        EXPECT_EQ(ring->free_slots(), 1u);
    }
    EXPECT_LE(seen.size(), 3u);
    EXPECT_EQ(ring->free_slots(), 3u);
    EXPECT_FALSE(ring->pinned());
}

TEST(StageRing, AllLentMeansNoSlotUntilOneReturns) {
    auto ring = HostSlotRing::create(2, 64, false);
    auto a = ring->try_acquire();
    auto b = ring->try_acquire();
    EXPECT_EQ(ring->try_acquire(), nullptr);
    const std::byte* returned = a->block.data();
    a.reset();
    auto c = ring->try_acquire();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->block.data(), returned);
}

TEST(StageRing, AcquireBlocksUntilASlotReturns) {
    auto ring = HostSlotRing::create(1, 64, false);
    auto held = ring->acquire();
    std::atomic<bool> got{false};
    std::thread producer([&] {
        auto s = ring->acquire();
        got = s != nullptr;
    });
    while (ring->waiting() == 0) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(got.load());
    held.reset();
    producer.join();
    EXPECT_TRUE(got.load());
}

TEST(StageRing, ShutdownWakesWaitersAndLentSlotsStillReturn) {
    auto ring = HostSlotRing::create(1, 64, false);
    auto held = ring->acquire();
    std::thread producer([&] { EXPECT_EQ(ring->acquire(), nullptr); });
    while (ring->waiting() == 0) std::this_thread::yield();
    ring->shutdown();
    producer.join();
    EXPECT_EQ(ring->try_acquire(), nullptr);
    held.reset();
    EXPECT_EQ(ring->free_slots(), 1u);
}

TEST(StageRing, SlotOutlivesTheRingsOwner) {
    auto ring = HostSlotRing::create(2, 128, false);
    std::shared_ptr<HostSlot> slot = ring->acquire();
    std::weak_ptr<HostSlotRing> weak = ring;
    ring.reset();
    EXPECT_FALSE(weak.expired());  // the lease keeps it
    for (std::size_t i = 0; i < 128; ++i) slot->block.data()[i] = std::byte{0x5A};
    slot.reset();
    EXPECT_TRUE(weak.expired());
}

TEST(StageRing, ZeroSlotsIsAConfigError) {
    EXPECT_THROW(HostSlotRing::create(0, 64, false), mpistage::ConfigError);
}
