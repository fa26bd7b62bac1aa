// OnCorrupt::skip keeps every record whose framing is intact: random files with random damage
// (length CRC, length field, payload, payload CRC, truncation) give exactly the records and
// skip counts of an independent sequential reference scanner written here, at W = 1..64
// simulated ranks through the production split (`split_at_cuts` / `simulate_split`).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/crc32c.hpp"
#include "sources/tfrecord/framing.hpp"

using namespace mpistage;
using namespace mpistage::tfrecord;

namespace {

std::uint64_t le64(const std::vector<std::uint8_t>& b, std::uint64_t p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | b[p + static_cast<std::uint64_t>(i)];
    return v;
}

std::uint32_t le32(const std::vector<std::uint8_t>& b, std::uint64_t p) {
    return static_cast<std::uint32_t>(
        le64(std::vector<std::uint8_t>{b[p], b[p + 1], b[p + 2], b[p + 3], 0, 0, 0, 0}, 0));
}

std::uint32_t ref_masked_crc(const std::uint8_t* p, std::size_t n) {
    const std::uint32_t c = crc32c_reference(p, n);  // bitwise, not the ISA-L production path
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

struct Reference {
    std::vector<std::uint64_t> offsets;
    std::vector<std::uint64_t> lengths;
    std::uint64_t skipped = 0;
    std::uint64_t skipped_bytes = 0;
};

/// The specification, sequentially: a header is valid when 16 bytes are left, its length CRC
/// matches and the record fits; a valid record with a bad payload CRC is skipped (16 + length
/// bytes); after an invalid header, the next valid header position ends a damaged region whose
/// records are counted by hopping over the unverified length fields that stay inside it.
Reference reference_scan(const std::vector<std::uint8_t>& b) {
    const std::uint64_t size = b.size();
    auto valid = [&](std::uint64_t pos, std::uint64_t& len) {
        if (size - pos < 16) return false;
        len = le64(b, pos);
        if (le32(b, pos + 8) != ref_masked_crc(b.data() + pos, 8)) return false;
        return len <= size - pos - 16;
    };
    Reference ref;
    std::uint64_t pos = 0;
    while (pos < size) {
        std::uint64_t len = 0;
        if (valid(pos, len)) {
            const auto crc = ref_masked_crc(b.data() + pos + 12, static_cast<std::size_t>(len));
            if (crc == le32(b, pos + 12 + len)) {
                ref.offsets.push_back(pos);
                ref.lengths.push_back(len);
            } else {
                ++ref.skipped;
                ref.skipped_bytes += 16 + len;
            }
            pos += 16 + len;
            continue;
        }
        std::uint64_t q = pos + 1;
        std::uint64_t unused = 0;
        while (q < size && !valid(q, unused)) ++q;
        for (std::uint64_t h = pos; h < q;) {
            ++ref.skipped;
            if (q - h < 16 || le64(b, h) > q - h - 16) break;
            h += 16 + le64(b, h);
        }
        ref.skipped_bytes += q - pos;
        pos = q;
    }
    return ref;
}

struct Damaged {
    std::vector<std::uint8_t> bytes;
    std::vector<std::uint64_t> offsets;  // record starts before damage
};

Damaged random_damaged_file(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    Damaged d;
    const std::size_t n = 5 + rng() % 60;
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<std::uint8_t> payload(rng() % (rng() % 4 == 0 ? 2000 : 50));
        for (auto& x : payload) x = static_cast<std::uint8_t>(rng());
        d.offsets.push_back(d.bytes.size());
        append_record(d.bytes, payload.data(), payload.size());
    }
    const std::size_t damages = 1 + rng() % 6;
    for (std::size_t k = 0; k < damages; ++k) {
        const std::size_t i = rng() % n;
        const std::uint64_t at = d.offsets[i];
        const std::uint64_t end = i + 1 < n ? d.offsets[i + 1] : d.bytes.size();
        const std::uint64_t len = end - at - 16;  // as written (the field may be damaged)
        switch (rng() % 5) {
            case 0:  // length CRC
                d.bytes[at + 8 + rng() % 4] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
                break;
            case 1:  // length field
                d.bytes[at + rng() % 8] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
                break;
            case 2:  // payload byte (or its CRC when empty)
                d.bytes[at + 12 + (len > 0 ? rng() % len : 0)] ^= 0x10;
                break;
            case 3:  // payload CRC
                d.bytes[at + 12 + len + rng() % 4] ^= 0x01;
                break;
            default:  // truncation (last damage: later offsets may be gone)
                d.bytes.resize(static_cast<std::size_t>(1 + rng() % d.bytes.size()));
                return d;
        }
    }
    return d;
}

ScanOptions skip_options() {
    ScanOptions o;
    o.on_corrupt = OnCorrupt::skip;
    o.verify_payloads = true;
    o.window_bytes = 64;  // small windows exercise the window refills
    return o;
}

void expect_matches(const std::vector<CutScan>& scans, const Reference& ref,
                    const std::string& what) {
    std::vector<RecordRef> all;
    std::uint64_t skipped = 0;
    std::uint64_t skipped_bytes = 0;
    for (const auto& s : scans) {
        all.insert(all.end(), s.records.begin(), s.records.end());
        skipped += s.skipped;
        skipped_bytes += s.skipped_bytes;
    }
    ASSERT_EQ(all.size(), ref.offsets.size()) << what;
    for (std::size_t i = 0; i < all.size(); ++i) {
        ASSERT_EQ(all[i].offset, ref.offsets[i]) << what << " record " << i;
        ASSERT_EQ(all[i].length, ref.lengths[i]) << what << " record " << i;
    }
    EXPECT_EQ(skipped, ref.skipped) << what;
    EXPECT_EQ(skipped_bytes, ref.skipped_bytes) << what;
}

/// `n` records of `len` bytes each holding their index; the length CRC of each record in `bad`
/// is flipped.
std::vector<std::uint8_t> file_with_bad_length_crcs(std::size_t n, std::size_t len,
                                                    const std::vector<std::size_t>& bad) {
    std::vector<std::uint8_t> bytes;
    std::vector<std::uint64_t> offsets;
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<std::uint8_t> payload(len, static_cast<std::uint8_t>(i));
        offsets.push_back(bytes.size());
        append_record(bytes, payload.data(), payload.size());
    }
    for (auto i : bad) bytes[offsets[i] + 9] ^= 0x04;
    return bytes;
}

struct Kept {
    std::vector<std::uint64_t> ids;  // record offset / record size
    std::uint64_t skipped = 0;
    std::uint64_t skipped_bytes = 0;
};

Kept kept_ids(const std::vector<CutScan>& scans, std::size_t len) {
    Kept k;
    for (const auto& s : scans) {
        for (const auto& r : s.records) k.ids.push_back(r.offset / (len + 16));
        k.skipped += s.skipped;
        k.skipped_bytes += s.skipped_bytes;
    }
    return k;
}

}  // namespace

TEST(TfRecordSkip, RandomDamageMatchesReferenceAtAnyW) {
    std::uint64_t files_with_skips = 0;
    for (std::uint64_t seed = 1; seed <= 60; ++seed) {
        const Damaged d = random_damaged_file(seed);
        const Reference ref = reference_scan(d.bytes);
        files_with_skips += ref.skipped > 0 ? 1 : 0;
        const std::vector<ScanFile> files{memory_file("damaged", d.bytes.data(), d.bytes.size())};
        for (int w = 1; w <= 64; ++w) {
            expect_matches(simulate_split(files, w, skip_options()), ref,
                           "seed " + std::to_string(seed) + " W " + std::to_string(w));
        }
    }
    EXPECT_GE(files_with_skips, 50u) << "the generator should damage almost every file";
}

TEST(TfRecordSkip, EveryOtherLengthCrcBrokenKeepsTheIntactHalf) {
    // Regression: the look-ahead resync used to drop every intact record after a damaged one
    // (1 record staged, 1 skipped).
    const std::size_t n = 20;
    const std::size_t len = 30;
    std::vector<std::size_t> bad;
    for (std::size_t i = 1; i < n; i += 2) bad.push_back(i);
    const auto bytes = file_with_bad_length_crcs(n, len, bad);
    const std::vector<ScanFile> files{memory_file("alt", bytes.data(), bytes.size())};
    for (int w = 1; w <= 64; ++w) {
        const auto [kept, skipped, skipped_bytes] =
            kept_ids(simulate_split(files, w, skip_options()), len);
        EXPECT_EQ(kept, (std::vector<std::uint64_t>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18})) << w;
        EXPECT_EQ(skipped, 10u) << "W " << w;
        EXPECT_EQ(skipped_bytes, 10u * (len + 16)) << "W " << w;
    }
}

TEST(TfRecordSkip, ThreeBadLengthCrcsTwoAdjacent) {
    // Regression: reported 2 skipped (the adjacent pair counted once) and dropped intact records.
    const std::size_t len = 25;
    const auto bytes = file_with_bad_length_crcs(10, len, {2, 3, 7});
    const std::vector<ScanFile> files{memory_file("three", bytes.data(), bytes.size())};
    for (int w = 1; w <= 64; ++w) {
        const auto [kept, skipped, skipped_bytes] =
            kept_ids(simulate_split(files, w, skip_options()), len);
        EXPECT_EQ(kept, (std::vector<std::uint64_t>{0, 1, 4, 5, 6, 8, 9})) << "W " << w;
        EXPECT_EQ(skipped, 3u) << "W " << w;
        EXPECT_EQ(skipped_bytes, 3u * (len + 16)) << "W " << w;
    }
}

TEST(TfRecordSkip, ReferenceAgreesOnUndamagedFiles) {
    // The reference scanner itself: on an undamaged file it finds exactly the written records.
    const auto bytes = file_with_bad_length_crcs(12, 7, {});
    const Reference ref = reference_scan(bytes);
    ASSERT_EQ(ref.offsets.size(), 12u);
    for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(ref.offsets[i], i * 23);
    EXPECT_EQ(ref.skipped, 0u);
    EXPECT_EQ(ref.skipped_bytes, 0u);
}
