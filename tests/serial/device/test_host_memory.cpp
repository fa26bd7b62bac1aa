// Pageable host blocks of the batch ring come with their pages mapped (HostBlock populates them
// at allocation, with util's populate_pages), so a loader's first epoch does not fault them in one
// 4 KiB page at a time.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/host_memory.hpp"
#include "util/page_populate.hpp"

using mpistage::detail::HostBlock;
using mpistage::detail::populate_pages;
using mpistage::detail::PopulateFor;

namespace {

/// Pages of `[data, data + bytes)` that mincore(2) reports resident (data page-aligned).
std::size_t resident_pages(const std::byte* data, std::size_t bytes) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t pages = (bytes + page - 1) / page;
    std::vector<unsigned char> in(pages);
    EXPECT_EQ(::mincore(const_cast<std::byte*>(data), bytes, in.data()), 0);
    std::size_t n = 0;
    for (const unsigned char c : in) n += c & 1u;
    return n;
}

}  // namespace

TEST(HostBlock, PageablePagesAreMappedAtAllocation) {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    // Large enough that the allocator maps it freshly (a block of a 16 x 150 KB batch is 2.4 MB),
    // and an odd size: the last, partial page counts too.
    for (const std::size_t bytes : {std::size_t{5} << 20, (std::size_t{3} << 20) + 5}) {
        const HostBlock block(bytes, /*pinned=*/false);
        ASSERT_NE(block.data(), nullptr);
        EXPECT_FALSE(block.pinned());
        // Aligned to the larger of 4 KiB and the page, as HostBlock promises.
        EXPECT_EQ(
            reinterpret_cast<std::uintptr_t>(block.data()) % std::max<std::size_t>(4096, page), 0u);
        const std::size_t pages = (bytes + page - 1) / page;
        EXPECT_EQ(resident_pages(block.data(), bytes), pages) << bytes << " bytes";
    }
}

TEST(HostBlock, PopulatePagesForWritingMapsAFreshMappingContentsUnchanged) {
    // What HostBlock calls (util/page_populate.hpp), on a private mapping nobody touched yet,
    // from an address inside its first page: every page of the mapping is resident afterwards,
    // and it still reads zero.
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t bytes = 64 * page;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    auto* data = static_cast<std::byte*>(p);
    EXPECT_EQ(resident_pages(data, bytes), 0u);
    (void)populate_pages(data + 13, bytes - 13, PopulateFor::write);
    EXPECT_EQ(resident_pages(data, bytes), 64u);
    EXPECT_EQ(data[0], std::byte{0});
    EXPECT_EQ(data[bytes - 1], std::byte{0});
    ::munmap(p, bytes);
}
