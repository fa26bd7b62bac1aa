/// @file
/// mpistage::Permutation: a keyed bijection of [0, n), evaluated per position.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "mpistage/plan.hpp"

TEST(PlanPermutation, IsABijection) {
    const std::vector<std::uint64_t> keys = {0,
                                             1,
                                             2,
                                             42,
                                             0xdeadbeefULL,
                                             0x9e3779b97f4a7c15ULL,
                                             std::numeric_limits<std::uint64_t>::max()};
    for (const std::uint64_t n : {0u, 1u, 2u, 3u, 5u, 17u, 1000u, 4097u}) {
        for (const std::uint64_t key : keys) {
            const mpistage::Permutation perm(n, key);
            EXPECT_EQ(perm.size(), n);
            std::vector<std::uint8_t> hit(n, 0);
            bool identity = true;
            for (std::uint64_t i = 0; i < n; ++i) {
                const std::uint64_t y = perm(i);
                ASSERT_LT(y, n) << "n=" << n << " key=" << key << " i=" << i;
                ASSERT_EQ(hit[y], 0) << "n=" << n << " key=" << key << ": " << y << " hit twice";
                hit[y] = 1;
                identity = identity && y == i;
                ASSERT_EQ(perm(i), y) << "not deterministic";
                ASSERT_EQ(mpistage::Permutation(n, key)(i), y) << "depends on more than (n, key)";
            }
            EXPECT_TRUE(std::all_of(hit.begin(), hit.end(), [](std::uint8_t h) { return h; }));
            if (n >= 17) EXPECT_FALSE(identity) << "n=" << n << " key=" << key << " is identity";
        }
    }
}

TEST(PlanPermutation, DifferentKeysGiveDifferentOrders) {
    for (const std::uint64_t n : {17u, 1000u, 4097u}) {
        const mpistage::Permutation a(n, 1);
        const mpistage::Permutation b(n, 2);
        std::uint64_t same = 0;
        for (std::uint64_t i = 0; i < n; ++i) same += a(i) == b(i);
        EXPECT_LT(same, n / 2) << "n=" << n;
    }
}

TEST(PlanPermutation, LargeDomainStaysInRangeAndInjectiveOnASample) {
    // Per-position evaluation without materialising N (global sharding of huge datasets).
    for (const std::uint64_t n : {(std::uint64_t{1} << 40) + 3, (std::uint64_t{1} << 63) + 12345}) {
        const mpistage::Permutation perm(n, 5);
        std::set<std::uint64_t> images;
        for (std::uint64_t i = 0; i < 2000; ++i) {
            const std::uint64_t pos = i * (n / 2000);
            const std::uint64_t y = perm(pos);
            ASSERT_LT(y, n);
            images.insert(y);
        }
        EXPECT_EQ(images.size(), 2000u);
    }
}
