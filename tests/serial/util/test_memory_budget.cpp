// The up-front memory check (util/memory_budget.hpp): bookkeeping over a rank's share of the
// node's memory is a ConfigError naming what needs it and the bytes, before any allocation;
// sizes of huge N saturate instead of wrapping.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "mpistage/error.hpp"
#include "util/memory_budget.hpp"

using namespace mpistage;

TEST(MemoryBudget, OverTheShareIsAConfigErrorNamingWhatAndBytes) {
    const std::uint64_t share = detail::memory_share_bytes(4);
    if (share == 0) GTEST_SKIP() << "physical memory unknown";
    EXPECT_EQ(detail::memory_share_bytes(1) / 4, share);  // divided among the node's ranks
    EXPECT_NO_THROW(detail::check_memory_share(share, 4, "x", "y"));
    try {
        detail::check_memory_share(share + 1, 4, "tfrecord: the descriptors of file.tfrecord",
                                   "split the dataset");
        ADD_FAILURE() << "no error above the share";
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("tfrecord: the descriptors of file.tfrecord needs " +
                         std::to_string(share + 1) + " bytes"),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find(std::to_string(share) + " bytes"), std::string::npos) << m;
        EXPECT_NE(m.find("split the dataset"), std::string::npos) << m;
    }
}

TEST(MemoryBudget, SizesSaturate) {
    const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
    EXPECT_EQ(detail::saturating_mul(1000000000000ull, 16), 16000000000000ull);
    EXPECT_EQ(detail::saturating_mul(max / 2, 16), max);
    EXPECT_EQ(detail::saturating_mul(0, max), 0u);
    EXPECT_GT(detail::resident_bytes(), 0u);
}
