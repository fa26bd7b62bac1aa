// TfRecordSource collective safety under MPI: skip keeps every intact record (the same ids and
// counts on every rank), a gzip bomb fails fast with bounded memory, and a FIFO given as data
// or index file is the same ConfigError on every rank instead of a hang.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/framing.hpp"
#include "../../tfrecord_test_util.hpp"

using namespace mpistage;
using namespace mpistage::tfrecord_test;

namespace {

constexpr std::size_t kPayloadBytes = 24;

/// `n` records whose payload is their id repeated; the length CRC of each id in `bad` is
/// flipped. Returns the bytes (written by the caller).
std::vector<std::uint8_t> records_with_bad_length_crcs(std::size_t n,
                                                       const std::vector<std::size_t>& bad) {
    std::vector<std::uint8_t> bytes;
    for (std::size_t i = 0; i < n; ++i) {
        const std::vector<std::uint8_t> payload(kPayloadBytes, static_cast<std::uint8_t>(i));
        tfrecord::append_record(bytes, payload.data(), payload.size());
    }
    for (auto i : bad) bytes[i * (kPayloadBytes + 16) + 9] ^= 0x02;
    return bytes;
}

/// Opens `path` with skip on every rank and checks the kept ids (the payload bytes) and counts.
void expect_kept(const Communicator& comm, const std::string& path,
                 const std::vector<std::uint8_t>& kept_ids, std::uint64_t skipped) {
    TfRecordOptions o;
    o.on_corrupt = OnCorrupt::skip;
    TfRecordSource src(comm, {path}, o);
    EXPECT_EQ(src.num_samples(), kept_ids.size());
    EXPECT_EQ(src.skipped_records(), skipped);
    EXPECT_EQ(src.skipped_bytes(), skipped * (kPayloadBytes + 16));
    const auto stats = src.statistics();
    EXPECT_EQ(stats.size(), 3u);
    if (stats.size() == 3) {
        EXPECT_EQ(stats[0].name, "skipped_records");
        EXPECT_EQ(stats[0].value, skipped);
        EXPECT_EQ(stats[1].name, "skipped_bytes");
        EXPECT_EQ(stats[1].value, skipped * (kPayloadBytes + 16));
        EXPECT_EQ(stats[2].name, "resync_rounds");
        EXPECT_EQ(stats[2].value, static_cast<std::uint64_t>(src.resync_rounds()));
    }
    LocalStatus status = capture([&] {
        std::vector<std::uint64_t> ids(src.num_samples());
        for (std::uint64_t i = 0; i < ids.size(); ++i) ids[i] = i;
        test::VecSink sink(src.fields());
        src.read(ids.data(), ids.size(), sink);
        for (std::size_t k = 0; k < ids.size() && k < kept_ids.size(); ++k) {
            ASSERT_EQ(sink.ragged_[0][k].size(), kPayloadBytes);
            EXPECT_EQ(static_cast<std::uint8_t>(sink.ragged_[0][k][0]), kept_ids[k]) << k;
        }
    });
    EXPECT_FALSE(status.failed) << status.message;
    expect_exactly_once(comm, src, 3);
}

/// Writes a single-member gzip file of `gib` GiB of zeros without holding it: the raw deflate
/// of 1 MiB of zeros after a full flush is the same bytes every time, so it is computed once
/// and repeated between a gzip header and trailer (zlib level 1, as `gzip -1` writes them).
void write_zero_gzip(const std::string& path, std::uint64_t mib) {
    z_stream zs{};
    ASSERT_EQ(deflateInit2(&zs, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    std::vector<std::uint8_t> zeros(1 << 20, 0);
    std::vector<std::uint8_t> chunk[3];
    for (auto& c : chunk) {
        c.assign(1 << 20, 0);
        zs.next_in = zeros.data();
        zs.avail_in = static_cast<uInt>(zeros.size());
        zs.next_out = c.data();
        zs.avail_out = static_cast<uInt>(c.size());
        ASSERT_EQ(deflate(&zs, Z_FULL_FLUSH), Z_OK);
        ASSERT_EQ(zs.avail_in, 0u);
        c.resize(c.size() - zs.avail_out);
    }
    deflateEnd(&zs);
    ASSERT_EQ(chunk[1], chunk[2]) << "deflate output after a full flush is not periodic";
    const std::uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    out.write(reinterpret_cast<const char*>(chunk[0].data()),
              static_cast<std::streamsize>(chunk[0].size()));
    const uLong one = crc32(0, zeros.data(), static_cast<uInt>(zeros.size()));
    uLong crc = one;
    for (std::uint64_t i = 1; i < mib; ++i) {
        out.write(reinterpret_cast<const char*>(chunk[1].data()),
                  static_cast<std::streamsize>(chunk[1].size()));
        crc = crc32_combine(crc, one, static_cast<z_off_t>(zeros.size()));
    }
    const std::uint8_t last_block[2] = {0x03, 0x00};  // final, fixed Huffman, end of block
    out.write(reinterpret_cast<const char*>(last_block), 2);
    const std::uint64_t isize = (mib << 20) & 0xffffffffu;
    std::uint8_t trailer[8];
    for (int i = 0; i < 4; ++i) {
        trailer[i] = static_cast<std::uint8_t>(crc >> (8 * i));
        trailer[4 + i] = static_cast<std::uint8_t>(isize >> (8 * i));
    }
    out.write(reinterpret_cast<const char*>(trailer), 8);
}

std::uint64_t max_rss_bytes() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<std::uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace

TEST(TfRecordSafety, SkipKeepsEveryIntactRecord) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = shared_tmp_dir(comm);
    const std::string alternate = dir + "/alternate.tfrecords";
    const std::string three = dir + "/three.tfrecords";
    std::vector<std::size_t> odd;
    for (std::size_t i = 1; i < 20; i += 2) odd.push_back(i);
    if (comm.rank() == 0) {
        spit(alternate, records_with_bad_length_crcs(20, odd));
        spit(three, records_with_bad_length_crcs(10, {2, 3, 7}));
    }
    comm.barrier();
    expect_kept(comm, alternate, {0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, 10);
    expect_kept(comm, three, {0, 1, 4, 5, 6, 8, 9}, 3);
    // Under the default policy the first damaged header is the agreed error.
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {three}); }, ErrorKind::format,
                        {"three.tfrecords: not a TFRecord / truncated record at offset " +
                             std::to_string(2 * (kPayloadBytes + 16)),
                         "length CRC32C mismatch"});
    comm.barrier();
    if (comm.rank() == 0) {
        std::remove(alternate.c_str());
        std::remove(three.c_str());
        std::remove(dir.c_str());
    }
}

TEST(TfRecordSafety, GzipBombFailsFastWithBoundedMemory) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = shared_tmp_dir(comm);
    const std::string bomb = dir + "/zeros.tfrecord.gz";
    if (comm.rank() == 0) write_zero_gzip(bomb, 2048);  // 2 GiB of zeros, about 9.4 MB
    comm.barrier();
    const std::uint64_t rss_before = max_rss_bytes();
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {bomb}); }, ErrorKind::format,
                        {"zeros.tfrecord.gz (decompressed): not a TFRecord / truncated record at "
                         "offset 0",
                         "length CRC32C mismatch"});
    // Skip policy: the damaged stream is inflated further, up to the size limit.
    TfRecordOptions limited;
    limited.on_corrupt = OnCorrupt::skip;
    limited.max_decompressed_bytes = std::uint64_t{128} << 20;
    expect_agreed_error(
        comm, [&] { TfRecordSource src(comm, {bomb}, limited); }, ErrorKind::format,
        {"zeros.tfrecord.gz: decompresses to more than 134217728 bytes", "max_decompressed_bytes"});
    const std::uint64_t growth = max_rss_bytes() - rss_before;
    EXPECT_LT(growth, std::uint64_t{512} << 20) << "peak RSS grew by " << growth << " bytes";
    comm.barrier();
    if (comm.rank() == 0) {
        std::remove(bomb.c_str());
        std::remove(dir.c_str());
    }
}

TEST(TfRecordSafety, FifoIsAnAgreedConfigErrorNotAHang) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = shared_tmp_dir(comm);
    const std::string fifo = dir + "/pipe.tfrecords";
    const std::string data = dir + "/data.tfrecords";
    if (comm.rank() == 0) {
        EXPECT_EQ(mkfifo(fifo.c_str(), 0600), 0);
        spit(data, records_with_bad_length_crcs(4, {}));
    }
    comm.barrier();
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {fifo}); }, ErrorKind::config,
                        {"'" + fifo + "' is a FIFO (named pipe)"});
    TfRecordOptions o;
    o.index_paths = {fifo};
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {data}, o); }, ErrorKind::config,
                        {"tfrecord: index: '" + fifo + "' is a FIFO (named pipe)"});
    comm.barrier();
    if (comm.rank() == 0) {
        std::remove(fifo.c_str());
        std::remove(data.c_str());
        std::remove(dir.c_str());
    }
}
