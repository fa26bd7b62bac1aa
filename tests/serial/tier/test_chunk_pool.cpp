// The chunk read-ahead's pool of mappings (src/tier/chunk_read_ahead.hpp, ChunkPool): a mapping
// given back is reused for a chunk of its size, and the free mappings with the chunks in use
// never exceed the limit (a mapping that would pass it is unmapped, and a new one unmaps free
// ones first). Mappings are whole pages (4 KiB here).
#include <gtest/gtest.h>

#include "tier/chunk_read_ahead.hpp"

using mpistage::detail::ChunkMemory;
using mpistage::detail::ChunkPool;

TEST(ChunkPool, ReusesAMappingOfTheSameSize) {
    ChunkPool pool(1 << 20);
    ChunkMemory a = pool.take(4096, 4096);
    a.data()[0] = std::byte{42};
    const std::byte* where = a.data();
    pool.give(std::move(a), 0);
    EXPECT_EQ(pool.free_bytes(), 4096u);
    ChunkMemory b = pool.take(4096, 4096);  // the same mapping, its bytes as they were
    EXPECT_EQ(b.data(), where);
    EXPECT_EQ(b.data()[0], std::byte{42});
    EXPECT_EQ(pool.free_bytes(), 0u);
    ChunkMemory c = pool.take(8192, 12288);  // another size: a new mapping
    EXPECT_NE(c.data(), b.data());
    EXPECT_EQ(c.bytes(), 8192u);
}

TEST(ChunkPool, FreeMappingsAndChunksInUseStayWithinTheLimit) {
    if (ChunkMemory::mapped_size(1) != 4096) GTEST_SKIP() << "the sizes below are 4 KiB pages";
    ChunkPool pool(16384);
    ChunkMemory a = pool.take(4096, 4096);
    ChunkMemory b = pool.take(4096, 8192);
    ChunkMemory c = pool.take(4096, 12288);
    pool.give(std::move(a), 8192);  // 4096 free + 8192 in use
    pool.give(std::move(b), 4096);  // 8192 free + 4096 in use
    EXPECT_EQ(pool.free_bytes(), 8192u);
    ChunkMemory big = pool.take(12288, 16384);  // no mapping of that size
    EXPECT_EQ(big.bytes(), 12288u);
    // 4096 (c) + 12288 (big) in use: no room for a free one, both were unmapped.
    EXPECT_EQ(pool.free_bytes(), 0u);
    pool.give(std::move(c), 12288);  // 4096 + 12288 fits 16384: kept
    EXPECT_EQ(pool.free_bytes(), 4096u);
    pool.give(std::move(big), 0);  // 4096 + 12288 free fits: kept
    EXPECT_EQ(pool.free_bytes(), 16384u);
    ChunkMemory odd = pool.take(20000, 20480);  // 5 pages, none free of that size
    EXPECT_EQ(odd.bytes(), 20480u);             // whole pages
    EXPECT_EQ(pool.free_bytes(), 0u);           // the free ones made room (unmapped)
    pool.give(std::move(odd), 0);               // larger than the limit: unmapped
    EXPECT_EQ(pool.free_bytes(), 0u);
    ChunkMemory page = pool.take(100, 4096);  // a page: mappings are whole pages
    EXPECT_EQ(page.bytes(), ChunkMemory::mapped_size(100));
}
