// Index-free TFRecord splitting: for generated files (uniform, skewed, heavy-tailed sizes,
// payloads holding whole TFRecord files, cut points inside headers and payloads) and W up to 64
// simulated ranks, the split finds exactly the records of a sequential scan, each once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "mpistage/error.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/crc32c.hpp"
#include "sources/tfrecord/framing.hpp"
#include "sweep_size.hpp"
#include "test_data.hpp"

using namespace mpistage;
using namespace mpistage::tfrecord;

namespace {

enum class Sizes { uniform, skewed, heavy, tiny };

struct Generated {
    std::vector<std::uint8_t> bytes;
    std::vector<std::uint64_t> offsets;  // true record starts
};

/// A file of `n` records; with `nest`, some payloads are whole TFRecord files (or runs of valid
/// headers), the hardest case for a resync.
Generated generate(std::uint64_t seed, std::size_t n, Sizes sizes, bool nest) {
    std::mt19937_64 rng(seed);
    Generated g;
    for (std::size_t i = 0; i < n; ++i) {
        std::size_t len = 0;
        switch (sizes) {
            case Sizes::uniform:
                len = rng() % 600;
                break;
            case Sizes::skewed:
                len = (rng() % 10 == 0) ? 2000 + rng() % 8000 : rng() % 40;
                break;
            case Sizes::heavy: {
                const double u = (static_cast<double>(rng() % 1000000) + 1.0) / 1000001.0;
                len =
                    std::min<std::size_t>(static_cast<std::size_t>(8.0 / std::pow(u, 1.2)), 200000);
                break;
            }
            case Sizes::tiny:
                len = rng() % 3;
                break;
        }
        std::vector<std::uint8_t> payload(len);
        for (auto& b : payload) b = static_cast<std::uint8_t>(rng());
        if (nest && rng() % 3 == 0) {
            // A payload that is itself a TFRecord file (records of 0..30 bytes), possibly with
            // a few prefix bytes, so valid-looking header chains sit inside the payload.
            payload.clear();
            const std::size_t prefix = rng() % 3;
            for (std::size_t k = 0; k < prefix; ++k)
                payload.push_back(static_cast<std::uint8_t>(rng()));
            const std::size_t inner = 1 + rng() % 6;
            for (std::size_t k = 0; k < inner; ++k) {
                std::vector<std::uint8_t> p(rng() % 31);
                for (auto& b : p) b = static_cast<std::uint8_t>(rng());
                append_record(payload, p.data(), p.size());
            }
        }
        g.offsets.push_back(g.bytes.size());
        append_record(g.bytes, payload.data(), payload.size());
    }
    return g;
}

std::vector<RecordRef> concat(const std::vector<CutScan>& scans) {
    std::vector<RecordRef> all;
    for (const auto& s : scans) all.insert(all.end(), s.records.begin(), s.records.end());
    return all;
}

void expect_same(const std::vector<RecordRef>& a, const std::vector<RecordRef>& b,
                 const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (std::size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].offset, b[i].offset) << what << " record " << i;
        ASSERT_EQ(a[i].length, b[i].length) << what << " record " << i;
        ASSERT_EQ(a[i].file, b[i].file) << what << " record " << i;
    }
}

/// The production split (the same agreement as the MPI source) over arbitrary cut points.
std::vector<CutScan> split_at(const std::vector<ScanFile>& files,
                              const std::vector<std::uint64_t>& cuts, const ScanOptions& o) {
    return split_at_cuts(files, cuts, o);
}

/// The simulated world sizes of the split sweep: every W from 1 to 64; under the sanitizers
/// (tests/common/sweep_size.hpp) W = 1-5, 7, 8, 16, 31, 33, 63 and 64: the small ones, odd
/// ones, around the powers of two, and the largest.
std::vector<int> swept_world_sizes() {
    std::vector<int> ws;
    for (int w = 1; w <= 64; ++w) ws.push_back(w);
    if (!mpistage_test::full_size_sweeps()) ws = {1, 2, 3, 4, 5, 7, 8, 16, 31, 33, 63, 64};
    return ws;
}

std::vector<std::uint8_t> slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(TfRecordFraming, AppendAndCheckHeader) {
    std::vector<std::uint8_t> buf;
    const std::string payload = "hello";
    append_record(buf, payload.data(), payload.size());
    ASSERT_EQ(buf.size(), payload.size() + kFramingBytes);
    std::uint64_t len = 0;
    EXPECT_EQ(check_header(buf.data(), 0, buf.size(), len), HeaderStatus::ok);
    EXPECT_EQ(len, 5u);
    EXPECT_EQ(check_header(buf.data(), 0, buf.size() - 1, len), HeaderStatus::does_not_fit);
    EXPECT_EQ(check_header(buf.data(), 0, 15, len), HeaderStatus::too_short);
    buf[9] ^= 1;
    EXPECT_EQ(check_header(buf.data(), 0, buf.size(), len), HeaderStatus::bad_length_crc);
}

TEST(TfRecordFraming, SequentialScanFindsEveryRecord) {
    for (auto sz : {Sizes::uniform, Sizes::skewed, Sizes::heavy, Sizes::tiny}) {
        for (bool nest : {false, true}) {
            auto g = generate(11 + static_cast<int>(sz), 300, sz, nest);
            std::vector<ScanFile> files{memory_file("gen", g.bytes.data(), g.bytes.size())};
            const auto seq = walk_cut(files, 0, g.bytes.size(), ScanOptions{});
            ASSERT_EQ(seq.records.size(), g.offsets.size());
            for (std::size_t i = 0; i < g.offsets.size(); ++i) {
                EXPECT_EQ(seq.records[i].offset, g.offsets[i]);
            }
            EXPECT_EQ(seq.stop, g.bytes.size());
        }
    }
}

TEST(TfRecordSplit, EqualsSequentialScanUpTo64Ranks) {
    int fooled = 0;
    for (auto sz : {Sizes::uniform, Sizes::skewed, Sizes::heavy, Sizes::tiny}) {
        for (bool nest : {false, true}) {
            // Three files of different sizes (records never span files), one tiny.
            auto a = generate(100 + static_cast<int>(sz) * 2 + nest, 400, sz, nest);
            auto b = generate(200 + static_cast<int>(sz) * 2 + nest, 1, sz, nest);
            auto c = generate(300 + static_cast<int>(sz) * 2 + nest, 250, sz, nest);
            std::vector<ScanFile> files{memory_file("a", a.bytes.data(), a.bytes.size()),
                                        memory_file("b", b.bytes.data(), b.bytes.size()),
                                        memory_file("c", c.bytes.data(), c.bytes.size())};
            const std::uint64_t total = file_starts(files).back();
            const auto seq = walk_cut(files, 0, total, ScanOptions{});
            ASSERT_EQ(seq.records.size(), 651u);
            for (const int w : swept_world_sizes()) {
                int rounds = 0;
                const auto scans = simulate_split(files, w, ScanOptions{}, &rounds);
                fooled += rounds;
                expect_same(concat(scans), seq.records,
                            "sizes " + std::to_string(static_cast<int>(sz)) + " nest " +
                                std::to_string(nest) + " W " + std::to_string(w));
                // Each record is kept by the rank whose cut holds its first byte.
                const auto starts = file_starts(files);
                for (int r = 0; r < w; ++r) {
                    for (const auto& rec : scans[static_cast<std::size_t>(r)].records) {
                        const std::uint64_t pos = starts[rec.file] + rec.offset;
                        EXPECT_GE(pos, cut_begin(total, r, w));
                        EXPECT_LT(pos, cut_begin(total, r + 1, w));
                    }
                }
            }
        }
    }
    // The nested payloads do fool some resyncs; the agreement rounds repair them.
    std::cout << "[ info ] agreement rounds needed over all cases: " << fooled << std::endl;
}

TEST(TfRecordSplit, EveryCutPointInHeadersAndPayloads) {
    // Two ranks with the cut at every byte position of a small nested file, then three ranks
    // with cuts sweeping two positions: never a split or skipped record. The cost grows with
    // the square of the file (the three-rank sweep with its cube): 40 records, 8 under the
    // sanitizers (the first 8 of the same), where the three-rank cuts step coarser.
    auto g = generate(5, mpistage_test::sweep_size<std::size_t>(40, 8), Sizes::uniform, true);
    std::vector<ScanFile> files{memory_file("g", g.bytes.data(), g.bytes.size())};
    const std::uint64_t total = g.bytes.size();
    const auto seq = walk_cut(files, 0, total, ScanOptions{}).records;
    for (std::uint64_t c = 0; c <= total; ++c) {
        expect_same(concat(split_at(files, {0, c, total}, ScanOptions{})), seq,
                    "cut " + std::to_string(c));
    }
    const std::uint64_t step1 = mpistage_test::sweep_size<std::uint64_t>(37, 97);
    const std::uint64_t step2 = mpistage_test::sweep_size<std::uint64_t>(53, 139);
    for (std::uint64_t c1 = 0; c1 <= total; c1 += step1) {
        for (std::uint64_t c2 = c1; c2 <= total; c2 += step2) {
            expect_same(concat(split_at(files, {0, c1, c2, total}, ScanOptions{})), seq,
                        "cuts " + std::to_string(c1) + "," + std::to_string(c2));
        }
    }
}

TEST(TfRecordSplit, AdversarialPayloadOfHeaderRuns) {
    // One huge record whose payload is a TFRecord file of many tiny valid records: every cut
    // inside it resyncs to a false boundary, which the agreement must repair.
    std::vector<std::uint8_t> inner;
    for (int k = 0; k < 2000; ++k) {
        const std::uint8_t p = static_cast<std::uint8_t>(k);
        append_record(inner, &p, k % 2);
    }
    std::vector<std::uint8_t> bytes;
    const std::string small = "x";
    append_record(bytes, small.data(), small.size());
    append_record(bytes, inner.data(), inner.size());
    append_record(bytes, small.data(), small.size());
    std::vector<ScanFile> files{memory_file("adv", bytes.data(), bytes.size())};
    const auto seq = walk_cut(files, 0, bytes.size(), ScanOptions{}).records;
    ASSERT_EQ(seq.size(), 3u);
    int total_rounds = 0;
    for (int w = 1; w <= 64; ++w) {
        int rounds = 0;
        expect_same(concat(simulate_split(files, w, ScanOptions{}, &rounds)), seq,
                    "W " + std::to_string(w));
        total_rounds += rounds;
    }
    EXPECT_GT(total_rounds, 0) << "the resync heuristic was expected to be fooled here";
}

TEST(TfRecordSplit, WholeFilesOwnedOnce) {
    auto a = generate(1, 50, Sizes::uniform, false);
    std::vector<std::uint8_t> fake_gz(5000, 0x1f);
    auto c = generate(2, 50, Sizes::uniform, false);
    std::vector<ScanFile> files{memory_file("a", a.bytes.data(), a.bytes.size()),
                                memory_file("z.gz", fake_gz.data(), fake_gz.size()),
                                memory_file("c", c.bytes.data(), c.bytes.size())};
    files[1].whole = true;
    const auto seq = walk_cut(files, 0, file_starts(files).back(), ScanOptions{});
    ASSERT_EQ(seq.whole_files, std::vector<std::uint32_t>{1});
    for (int w = 1; w <= 64; ++w) {
        const auto scans = simulate_split(files, w, ScanOptions{});
        expect_same(concat(scans), seq.records, "W " + std::to_string(w));
        std::vector<std::uint32_t> owned;
        for (const auto& s : scans)
            owned.insert(owned.end(), s.whole_files.begin(), s.whole_files.end());
        EXPECT_EQ(owned, std::vector<std::uint32_t>{1}) << "W " << w;
    }
}

TEST(TfRecordFraming, DescriptorLimitIsAClearErrorNotAnOomKill) {
    // 1000 records need 16,000 bytes of descriptors; their vector grows by doubling, so the
    // growth from 512 to 1024 slots holds 8,192 + 16,384 = 24,576 bytes at once.
    auto g = generate(21, 1000, Sizes::tiny, false);
    std::vector<ScanFile> files{memory_file("many.tfrecord", g.bytes.data(), g.bytes.size())};
    ScanOptions o;
    o.max_descriptor_bytes = 16000;
    try {
        (void)scan_cut(files, 0, g.bytes.size(), o);
        FAIL() << "no error at a 16,000-byte limit";
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("tfrecord: many.tfrecord: this rank found 512 records up to offset "),
                  std::string::npos)
            << m;
        EXPECT_NE(m.find("would need 24576 bytes, more than this rank's share of the node's "
                         "memory (16000 bytes)"),
                  std::string::npos)
            << m;
    }
    o.max_descriptor_bytes = 24576;
    EXPECT_EQ(scan_cut(files, 0, g.bytes.size(), o).records.size(), 1000u);
    o.max_descriptor_bytes = 0;  // no limit
    EXPECT_EQ(scan_cut(files, 0, g.bytes.size(), o).records.size(), 1000u);
}

TEST(TfRecordSplit, CorruptionErrorsAndSkips) {
    auto g = generate(9, 200, Sizes::uniform, true);
    // Flip a payload byte of record 50 and a length-CRC byte of record 120.
    auto bytes = g.bytes;
    std::size_t r50 = 0;
    for (std::size_t i = 50; i < g.offsets.size(); ++i) {
        if (g.offsets[i + 1] - g.offsets[i] > kFramingBytes) {
            r50 = i;
            break;
        }
    }
    bytes[g.offsets[r50] + kHeaderBytes] ^= 0x40;
    bytes[g.offsets[120] + 9] ^= 0x01;
    std::vector<ScanFile> files{memory_file("bad", bytes.data(), bytes.size())};
    ScanOptions err;
    try {
        walk_cut(files, 0, bytes.size(), err);
        FAIL() << "expected a FormatError";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("bad: not a TFRecord / truncated record at offset " +
                                             std::to_string(g.offsets[120])),
                  std::string::npos)
            << e.what();
    }
    err.verify_payloads = true;
    try {
        walk_cut(files, 0, bytes.size(), err);
        FAIL() << "expected a FormatError";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("payload CRC32C mismatch in record at offset " +
                                             std::to_string(g.offsets[r50])),
                  std::string::npos)
            << e.what();
    }
    ScanOptions skip;
    skip.on_corrupt = OnCorrupt::skip;
    skip.verify_payloads = true;
    const auto seq = walk_cut(files, 0, bytes.size(), skip);
    EXPECT_GE(seq.skipped, 2u);
    EXPECT_GE(seq.records.size(), 190u);
    for (int w = 1; w <= 64; ++w) {
        const auto scans = simulate_split(files, w, skip);
        expect_same(concat(scans), seq.records, "skip W " + std::to_string(w));
        std::uint64_t skipped = 0;
        for (const auto& s : scans) skipped += s.skipped;
        EXPECT_EQ(skipped, seq.skipped) << "W " << w;
    }
}

TEST(TfRecordRealFiles, SpotifyMatchesItsIndexAtAnyW) {
    MPISTAGE_REQUIRE_TEST_DATA();
    const std::string dir = mpistage_test::data_dir() + "/tfrecord/";
    const auto bytes = slurp(dir + "spotify_part-00000-of-00004.tfrecords");
    ASSERT_EQ(bytes.size(), 2016623u);
    std::ifstream idx(dir + "spotify_part-00000-of-00004.idx");
    std::vector<std::pair<std::uint64_t, std::uint64_t>> lines;
    std::uint64_t o = 0, s = 0;
    while (idx >> o >> s) lines.emplace_back(o, s);
    ASSERT_EQ(lines.size(), 3750u);
    std::vector<ScanFile> files{memory_file("spotify", bytes.data(), bytes.size())};
    ScanOptions verify;
    verify.verify_payloads = true;
    const auto seq = walk_cut(files, 0, bytes.size(), verify).records;
    ASSERT_EQ(seq.size(), 3750u);
    std::uint32_t lo = UINT32_MAX, hi = 0;
    for (std::size_t i = 0; i < seq.size(); ++i) {
        EXPECT_EQ(seq[i].offset, lines[i].first);
        EXPECT_EQ(seq[i].length + kFramingBytes, lines[i].second);
        lo = std::min(lo, seq[i].length);
        hi = std::max(hi, seq[i].length);
    }
    EXPECT_EQ(lo, 370u);
    EXPECT_EQ(hi, 564u);
    for (int w : {2, 3, 4, 7, 16, 64}) {
        expect_same(concat(simulate_split(files, w, ScanOptions{})), seq, "W " + std::to_string(w));
    }
}

TEST(TfRecordRealFiles, LfsPointerRejectedBeforeAllocating) {
    MPISTAGE_REQUIRE_TEST_DATA();
    const std::string dir = mpistage_test::data_dir() + "/tfrecord/";
    const auto bytes = slurp(dir + "lfs_pointer.tfrecord");
    ASSERT_EQ(bytes.size(), 133u);
    std::vector<ScanFile> files{memory_file("lfs_pointer.tfrecord", bytes.data(), bytes.size())};
    try {
        walk_cut(files, 0, bytes.size(), ScanOptions{});
        FAIL() << "expected a FormatError";
    } catch (const FormatError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("not a TFRecord / truncated record at offset 0"), std::string::npos)
            << msg;
        EXPECT_NE(msg.find("2336927755350992246"), std::string::npos) << msg;
    }
}
