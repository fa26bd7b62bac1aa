// TfRecordSource under MPI on the real files of ../shared/data/tfrecord (SOURCES.md known
// answers) and on corrupted copies. Every rank makes the same collective calls; failures are
// recorded with EXPECT_* so no rank leaves a collective early.
#include <gtest/gtest.h>

#include <filesystem>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_data.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "../../tfrecord_test_util.hpp"
#include "vec_sink.hpp"

using namespace mpistage;
using namespace mpistage::tfrecord_test;

namespace {

const std::string kDir = mpistage_test::data_dir() + "/tfrecord/";
const std::string kSpotify = kDir + "spotify_part-00000-of-00004.tfrecords";
const std::string kSpotifyIdx = kDir + "spotify_part-00000-of-00004.idx";

}  // namespace

TEST(TfRecordMpi, SpotifyWithoutIndex) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(comm, {kSpotify});
    ASSERT_EQ(src.num_samples(), 3750u);  // identical on every rank: no collective follows
    // The byte space is the whole file (2016623 bytes, SOURCES.md), and the byte-range cuts of
    // all ranks hold each of its records once.
    EXPECT_EQ(std::filesystem::file_size(kSpotify), 2016623u);
    std::uint64_t in_cuts = 0;
    for (int r = 0; r < comm.size(); ++r) in_cuts += src.records_in_cut(r, comm.size());
    EXPECT_EQ(in_cuts, 3750u);
    EXPECT_EQ(src.skipped_records(), 0u);
    const auto idx = read_idx(kSpotifyIdx);
    ASSERT_EQ(idx.size(), 3750u);
    std::uint32_t lo = UINT32_MAX, hi = 0;
    for (std::uint64_t id = 0; id < 3750; ++id) {
        const auto r = src.record(id);
        EXPECT_EQ(r.offset, idx[id].first);
        EXPECT_EQ(r.length + 16u, idx[id].second);
        lo = std::min(lo, r.length);
        hi = std::max(hi, r.length);
    }
    EXPECT_EQ(lo, 370u);
    EXPECT_EQ(hi, 564u);
    EXPECT_EQ(src.fields().size(), 1u);
    EXPECT_EQ(src.fields()[0].name, "record");
    EXPECT_TRUE(src.fields()[0].ragged);
    expect_exactly_once(comm, src, 32);
    // Any rank can read any id (e.g. padding from another rank's range).
    const std::uint64_t ids[3] = {0, 1875, 3749};
    VecSink sink(src.fields());
    src.read(ids, 3, sink);
    EXPECT_EQ(sink.ragged_[0][2].size(), idx[3749].second - 16);
    src.close();
}

TEST(TfRecordMpi, SpotifyWithIndexMatchesScan) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    TfRecordOptions o;
    o.index_paths = {kSpotifyIdx};
    TfRecordSource with(comm, {kSpotify}, o);
    TfRecordSource without(comm, {kSpotify});
    ASSERT_EQ(with.num_samples(), 3750u);
    for (std::uint64_t id = 0; id < 3750; ++id) {
        EXPECT_EQ(with.record(id).offset, without.record(id).offset);
        EXPECT_EQ(with.record(id).length, without.record(id).length);
    }
    EXPECT_EQ(with.fingerprint(), without.fingerprint());
    for (int w = 1; w <= 8; ++w) {
        for (int r = 0; r < w; ++r)
            EXPECT_EQ(with.records_in_cut(r, w), without.records_in_cut(r, w));
    }
    expect_exactly_once(comm, with, 7);
}

TEST(TfRecordMpi, RoboflowExamples) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    TfRecordOptions o;
    o.features = {parse_feature_spec("id:int64"), parse_feature_spec("payload:bytes")};
    TfRecordSource src(comm, {kDir + "roboflow_37.tfrecord"}, o);
    ASSERT_EQ(src.num_samples(), 37u);
    std::vector<std::uint64_t> ids(37);
    for (std::uint64_t i = 0; i < 37; ++i) ids[i] = i;
    VecSink sink(src.fields());
    src.read(ids.data(), ids.size(), sink);
    for (std::size_t k = 0; k < 37; ++k) {
        std::int64_t id = -1;
        std::memcpy(&id, sink.fixed_[0].data() + 8 * k, 8);
        EXPECT_EQ(id, static_cast<std::int64_t>(k));
        EXPECT_EQ(sink.ragged_[1][k].size() + 0u, sink.ragged_[1][k].size());
    }
    std::uint32_t lo = UINT32_MAX, hi = 0;
    for (std::uint64_t id = 0; id < 37; ++id) {
        lo = std::min(lo, src.record(id).length);
        hi = std::max(hi, src.record(id).length);
    }
    EXPECT_EQ(lo, 33u);
    EXPECT_EQ(hi, 3530u);
    // A mistyped feature is a FormatError naming file, offset and feature.
    TfRecordOptions bad;
    bad.features = {parse_feature_spec("id:float")};
    TfRecordSource wrong(comm, {kDir + "roboflow_37.tfrecord"}, bad);
    VecSink s2(wrong.fields());
    const std::uint64_t one = 5;
    try {
        wrong.read(&one, 1, s2);
        ADD_FAILURE() << "expected FormatError";
    } catch (const FormatError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("roboflow_37.tfrecord record at offset "), std::string::npos) << msg;
        EXPECT_NE(msg.find("'id' is a int64 list, declared float"), std::string::npos) << msg;
    }
}

TEST(TfRecordMpi, TfxGzipShards) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    std::vector<std::string> paths;
    for (int i = 0; i < 12; ++i) {
        char name[64];
        std::snprintf(name, sizeof(name), "tfx_train/data_tfrecord-%05d-of-00012.gz", i);
        paths.push_back(kDir + name);
    }
    TfRecordSource src(comm, paths);
    ASSERT_EQ(src.num_samples(), 9909u);
    std::vector<int> per_file(12, 0);
    std::uint32_t lo = UINT32_MAX, hi = 0;
    for (std::uint64_t id = 0; id < 9909; ++id) {
        const auto r = src.record(id);
        ++per_file[r.file];
        lo = std::min(lo, r.length);
        hi = std::max(hi, r.length);
    }
    for (int i = 0; i < 12; ++i) {
        const bool short_shard = i == 3 || i == 5 || i == 11;
        EXPECT_EQ(per_file[static_cast<std::size_t>(i)], short_shard ? 825 : 826) << "shard " << i;
        EXPECT_TRUE(src.file_is_gzip(static_cast<std::size_t>(i)));
    }
    EXPECT_EQ(lo, 453u);
    EXPECT_EQ(hi, 529u);
    expect_exactly_once(comm, src, 64);
}

TEST(TfRecordMpi, SeveralFilesOneByteSpace) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    TfRecordSource src(
        comm, {kSpotify, kDir + "spotify_prediction_log.tfrecords", kDir + "roboflow_37.tfrecord"});
    ASSERT_EQ(src.num_samples(), 3750u + 10u + 37u);
    EXPECT_EQ(src.record(3750).file, 1u);
    EXPECT_EQ(src.record(3750).length, 40u);
    EXPECT_EQ(src.record(3760).file, 2u);
    expect_exactly_once(comm, src, 5);
}

TEST(TfRecordMpi, LfsPointerRejected) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {kDir + "lfs_pointer.tfrecord"}); },
                        ErrorKind::format,
                        {"lfs_pointer.tfrecord: not a TFRecord / truncated record at offset 0",
                         "2336927755350992246"});
}

TEST(TfRecordMpi, CorruptCopies) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = shared_tmp_dir(comm);
    const std::string truncated = dir + "/truncated.tfrecords";
    const std::string flipped = dir + "/flipped.tfrecords";
    const std::string empty = dir + "/empty.tfrecords";
    const auto idx = read_idx(kSpotifyIdx);
    const std::uint64_t flip_record = 1000;
    const std::uint64_t flip_offset = idx[flip_record].first;
    if (comm.rank() == 0) {
        auto bytes = slurp(kSpotify);
        spit(truncated, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + 1000000));
        bytes[flip_offset + 12 + 100] ^= 0x20;
        spit(flipped, bytes);
        spit(empty, {});
    }
    comm.barrier();
    // Truncated mid-record: the record at the cut is named by its offset.
    std::uint64_t cut_record = 0;
    while (idx[cut_record + 1].first <= 1000000) ++cut_record;
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {truncated}); }, ErrorKind::format,
                        {"truncated.tfrecords: not a TFRecord / truncated record at offset " +
                         std::to_string(idx[cut_record].first)});
    // Truncated under skip: the partial record is dropped and counted.
    {
        TfRecordOptions o;
        o.on_corrupt = OnCorrupt::skip;
        TfRecordSource src(comm, {truncated}, o);
        EXPECT_EQ(src.num_samples(), cut_record);
        EXPECT_EQ(src.skipped_records(), 1u);
    }
    // Flipped payload byte: opens (headers are fine); reading that record fails on any rank.
    {
        TfRecordSource src(comm, {flipped});
        EXPECT_EQ(src.num_samples(), 3750u);
        VecSink sink(src.fields());
        try {
            src.read(&flip_record, 1, sink);
            ADD_FAILURE() << "expected a payload CRC error";
        } catch (const FormatError& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("flipped.tfrecords: payload CRC32C mismatch in record at offset " +
                               std::to_string(flip_offset)),
                      std::string::npos)
                << msg;
        }
    }
    // ...or at open, on every rank, when asked to verify payloads at open.
    {
        TfRecordOptions o;
        o.verify_payloads_at_open = true;
        expect_agreed_error(
            comm, [&] { TfRecordSource src(comm, {flipped}, o); }, ErrorKind::format,
            {"payload CRC32C mismatch in record at offset " + std::to_string(flip_offset)});
    }
    // Skip policy: 3,749 records, one skipped, staged exactly once.
    {
        TfRecordOptions o;
        o.on_corrupt = OnCorrupt::skip;
        TfRecordSource src(comm, {flipped}, o);
        EXPECT_EQ(src.num_samples(), 3749u);
        EXPECT_EQ(src.skipped_records(), 1u);
        expect_exactly_once(comm, src, 16);
    }
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {empty}); }, ErrorKind::format,
                        {"empty.tfrecords: empty file"});
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {dir + "/missing.tfrecords"}); },
                        ErrorKind::io,
                        {"tfrecord: '" + dir + "/missing.tfrecords' does not exist"});
    comm.barrier();
    if (comm.rank() == 0) {
        std::remove(truncated.c_str());
        std::remove(flipped.c_str());
        std::remove(empty.c_str());
        std::remove(dir.c_str());
    }
}

TEST(TfRecordMpi, IndexOfAnotherFile) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    TfRecordOptions o;
    o.index_paths = {kSpotifyIdx};
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {kDir + "roboflow_37.tfrecord"}, o); },
                        ErrorKind::format,
                        {"index " + kSpotifyIdx + " line ", "roboflow_37.tfrecord"});
    TfRecordOptions two;
    two.index_paths = {kSpotifyIdx, kSpotifyIdx};
    expect_agreed_error(comm, [&] { TfRecordSource src(comm, {kSpotify}, two); }, ErrorKind::config,
                        {"2 index files for 1 data files"});
}

TEST(TfRecordMpi, WriteDaliIndexMatchesReference) {
    MPISTAGE_REQUIRE_TEST_DATA();
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = shared_tmp_dir(comm);
    const std::string out = dir + "/spotify.idx";
    write_dali_index(comm, {kSpotify}, {out});
    comm.barrier();
    const auto mine = slurp(out);
    const auto ref = slurp(kSpotifyIdx);
    EXPECT_EQ(mine.size(), ref.size());
    EXPECT_TRUE(mine == ref);
    comm.barrier();
    if (comm.rank() == 0) {
        std::remove(out.c_str());
        std::remove(dir.c_str());
    }
}
