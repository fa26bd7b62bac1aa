// CRC32C known answers (RFC 3720 B.4 test vectors, the "123456789" check value) and the
// TFRecord mask (TensorFlow crc32c_test.cc).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sources/tfrecord/crc32c.hpp"

using namespace mpistage;

TEST(Crc32c, CheckValue) {
    const std::string s = "123456789";
    EXPECT_EQ(crc32c(s.data(), s.size()), 0xE3069283u);
    EXPECT_EQ(crc32c_reference(s.data(), s.size()), 0xE3069283u);
    EXPECT_EQ(crc32c_table(s.data(), s.size()), 0xE3069283u);
    EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, Rfc3720Vectors) {
    std::vector<std::uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
    for (int i = 0; i < 32; ++i) {
        inc[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
        dec[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(31 - i);
    }
    EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(crc32c(dec.data(), 32), 0x113FDB5Cu);
}

TEST(Crc32c, ExtendEqualsWhole) {
    std::mt19937_64 rng(7);
    std::vector<std::uint8_t> data(100000);
    for (auto& b : data) b = static_cast<std::uint8_t>(rng());
    const std::uint32_t whole = crc32c(data.data(), data.size());
    EXPECT_EQ(whole, crc32c_table(data.data(), data.size()));
    EXPECT_EQ(whole, crc32c_reference(data.data(), data.size()));
    for (std::size_t split : {0ul, 1ul, 7ul, 4096ul, 99999ul, 100000ul}) {
        const std::uint32_t a = crc32c(data.data(), split);
        EXPECT_EQ(crc32c(data.data() + split, data.size() - split, a), whole) << split;
    }
    // Unaligned starts and odd lengths agree with the reference.
    for (std::size_t off = 0; off < 16; ++off) {
        for (std::size_t len : {0ul, 1ul, 3ul, 8ul, 15ul, 63ul, 257ul}) {
            EXPECT_EQ(crc32c(data.data() + off, len), crc32c_reference(data.data() + off, len));
        }
    }
}

TEST(Crc32c, Mask) {
    // TensorFlow crc32c_test.cc: Mask(crc) != crc, Mask(Mask(crc)) != crc, Unmask inverts.
    const std::string foo = "foo";
    const std::uint32_t crc = crc32c(foo.data(), foo.size());
    EXPECT_NE(crc, mask_crc32c(crc));
    EXPECT_NE(crc, mask_crc32c(mask_crc32c(crc)));
    EXPECT_EQ(crc, unmask_crc32c(mask_crc32c(crc)));
    EXPECT_EQ(crc, unmask_crc32c(unmask_crc32c(mask_crc32c(mask_crc32c(crc)))));
    EXPECT_EQ(mask_crc32c(0u), 0xa282ead8u);
    EXPECT_EQ(mask_crc32c(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
    EXPECT_EQ(masked_crc32c(foo.data(), foo.size()), mask_crc32c(crc));
}
