// Fingerprint levels (docs/resume.md, "Fingerprint levels"): each edit is caught by the level
// that claims to catch it — a flipped byte and a rewritten record of the same size by `full`,
// rows permuted with samples 0, N/2 and N−1 kept by `sampled` (and `full`), a TFRecord record
// rewritten with another length by `sampled` when it reads it, by `full` and `sampled_v4`
// anywhere — and what a level does not claim is shown missed. The fingerprint does not depend
// on the world size (a resume at another W). A state saved over one version of a file is refused
// over the other, the same on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../hdf5_test_util.hpp"
#include "../tfrecord_test_util.hpp"
#include "loader/fingerprint.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/framing.hpp"

namespace {

using namespace mpistage;

constexpr std::uint64_t kRows = 3000;  // more than the 1024 sampled positions
constexpr std::size_t kWidth = 16;

/// A row no level-`sampled` position reads, near `near`.
std::uint64_t unsampled_row(std::uint64_t near) {
    const auto p = detail::fingerprint_positions(kRows);
    while (std::binary_search(p.begin(), p.end(), near)) ++near;
    return near;
}

enum class Edit { none, flip_byte, permute_keep_ends, rewrite_record };

/// Collective: rank 0 writes images uint8 [kRows, 16] and labels int64 [kRows] with `edit`.
std::string write_variant(const Communicator& comm, const std::string& dir, Edit edit) {
    const std::string path = dir + "/fp_" + std::to_string(static_cast<int>(edit)) + ".h5";
    if (comm.rank() == 0) {
        std::vector<std::uint8_t> images(kRows * kWidth);
        std::vector<std::int64_t> labels(kRows);
        for (std::uint64_t i = 0; i < kRows; ++i) {
            for (std::size_t k = 0; k < kWidth; ++k) {
                images[i * kWidth + k] = static_cast<std::uint8_t>(i * 31 + k * 7);
            }
            labels[i] = static_cast<std::int64_t>(i % 10);
        }
        if (edit == Edit::flip_byte) images[unsampled_row(kRows / 2) * kWidth + 5] ^= 0x01;
        if (edit == Edit::permute_keep_ends) {
            // Rows 0, N/2 and N−1 stay; the rows between them are rotated by one.
            std::vector<std::uint64_t> from(kRows);
            for (std::uint64_t i = 0; i < kRows; ++i) from[i] = i;
            std::rotate(from.begin() + 1, from.begin() + 2, from.begin() + kRows / 2);
            std::rotate(from.begin() + kRows / 2 + 1, from.begin() + kRows / 2 + 2, from.end() - 1);
            const auto old_images = images;
            const auto old_labels = labels;
            for (std::uint64_t i = 0; i < kRows; ++i) {
                std::copy_n(old_images.begin() + static_cast<std::ptrdiff_t>(from[i] * kWidth),
                            kWidth, images.begin() + static_cast<std::ptrdiff_t>(i * kWidth));
                labels[i] = old_labels[from[i]];
            }
        }
        if (edit == Edit::rewrite_record) {
            const std::uint64_t r = unsampled_row(kRows / 3);
            for (std::size_t k = 0; k < kWidth; ++k) images[r * kWidth + k] = 0xEE;
            labels[r] = 77;
        }
        EXPECT_TRUE(h5t::write_hdf5(
            path, {{"images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {kRows, kWidth}, images.data(), {}},
                   {"labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {kRows}, labels.data(), {}}}));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return path;
}

/// Collective: the fingerprint of `path` at `level`, on `comm`.
std::string fingerprint_of(const Communicator& comm, const std::string& path,
                           FingerprintLevel level) {
    Hdf5Source src(comm, path);
    const std::string fp = detail::dataset_fingerprint(comm, src, src.num_samples(), 0, level);
    src.close();
    return fp;
}

/// Collective: the fingerprint at `level` computed by rank 0 alone (world size 1), on every
/// rank.
std::string fingerprint_at_one_rank(const Communicator& world, const std::string& path,
                                    FingerprintLevel level) {
    MPI_Comm one = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, world.rank() == 0 ? 0 : MPI_UNDEFINED, 0, &one);
    std::string fp;
    if (world.rank() == 0) {
        Communicator c(one);
        fp = fingerprint_of(c, path, level);
        c.free();
        MPI_Comm_free(&one);
    }
    return world.broadcast(fp, 0);
}

TEST(Fingerprint, EachEditIsCaughtByTheLevelThatClaimsIt) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = tfrecord_test::shared_tmp_dir(comm);
    const std::string base = write_variant(comm, dir, Edit::none);
    const std::string flipped = write_variant(comm, dir, Edit::flip_byte);
    const std::string permuted = write_variant(comm, dir, Edit::permute_keep_ends);
    const std::string rewritten = write_variant(comm, dir, Edit::rewrite_record);
    using L = FingerprintLevel;
    const auto fp = [&](const std::string& p, L l) { return fingerprint_of(comm, p, l); };
    // The ends level (state versions 1 and 2) sees none of these edits: the reason for levels.
    EXPECT_EQ(fp(base, L::ends), fp(permuted, L::ends));
    EXPECT_EQ(fp(base, L::ends), fp(flipped, L::ends));
    EXPECT_NE(fp(base, L::sampled), fp(permuted, L::sampled)) << "rows permuted, ends kept";
    EXPECT_NE(fp(base, L::full), fp(permuted, L::full));
    EXPECT_NE(fp(base, L::full), fp(flipped, L::full)) << "one flipped byte";
    EXPECT_NE(fp(base, L::full), fp(rewritten, L::full)) << "a record rewritten";
    // What `sampled` does not claim (docs/resume.md): a same-size edit of an unread sample.
    EXPECT_EQ(fp(base, L::sampled), fp(flipped, L::sampled));
    // The levels differ from each other, and each is the same at one rank as at W ranks.
    EXPECT_NE(fp(base, L::sampled), fp(base, L::full));
    for (const L l : {L::sampled, L::full}) {
        EXPECT_EQ(fp(base, l), fingerprint_at_one_rank(comm, base, l)) << to_string(l);
        EXPECT_EQ(fp(permuted, l), fingerprint_at_one_rank(comm, permuted, l)) << to_string(l);
    }
    comm.free();
}

// A TFRecord record rewritten with another length: caught by `sampled` when the record is one
// it reads (its bytes and its size), missed when it is not (the bounded sample's limit,
// docs/resume.md), caught anywhere by `full` and by the `sampled_v4` of older states (every
// sample's size).
TEST(Fingerprint, TfRecordRecordRewrittenWithAnotherLength) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = tfrecord_test::shared_tmp_dir(comm);
    const std::uint64_t r = unsampled_row(kRows / 2);
    const std::uint64_t read_row = detail::fingerprint_positions(kRows)[3];
    const auto write = [&](const std::string& name, int edit) {
        const std::string path = dir + "/" + name;
        if (comm.rank() == 0) {
            std::vector<std::uint8_t> bytes;
            for (std::uint64_t i = 0; i < kRows; ++i) {
                std::vector<std::uint8_t> payload(1 + (i * 13) % 40, static_cast<std::uint8_t>(i));
                if (i == r && edit == 1) payload.push_back(0);         // another length
                if (i == r && edit == 2) payload[0] ^= 0x80;           // same length, one bit
                if (i == read_row && edit == 3) payload.push_back(0);  // a read row, longer
                tfrecord::append_record(bytes, payload.data(), payload.size());
            }
            tfrecord_test::spit(path, bytes);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        return path;
    };
    const std::string base = write("base.tfrecord", 0);
    const std::string longer = write("longer.tfrecord", 1);
    const std::string bit = write("bit.tfrecord", 2);
    const std::string longer_read = write("longer_read.tfrecord", 3);
    const auto fp = [&](const std::string& p, FingerprintLevel l) {
        TfRecordSource src(comm, {p});
        const std::string out = detail::dataset_fingerprint(comm, src, src.num_samples(), 0, l);
        src.close();
        return out;
    };
    EXPECT_NE(fp(base, FingerprintLevel::sampled), fp(longer_read, FingerprintLevel::sampled));
    EXPECT_EQ(fp(base, FingerprintLevel::sampled), fp(longer, FingerprintLevel::sampled))
        << "sampled reads a bounded sample: an unread record is not covered";
    EXPECT_NE(fp(base, FingerprintLevel::sampled_v4), fp(longer, FingerprintLevel::sampled_v4));
    EXPECT_NE(fp(base, FingerprintLevel::full), fp(longer, FingerprintLevel::full));
    EXPECT_NE(fp(base, FingerprintLevel::full), fp(bit, FingerprintLevel::full));
    EXPECT_EQ(fp(base, FingerprintLevel::full), [&] {
        MPI_Comm one = MPI_COMM_NULL;
        MPI_Comm_split(MPI_COMM_WORLD, comm.rank() == 0 ? 0 : MPI_UNDEFINED, 0, &one);
        std::string v;
        if (comm.rank() == 0) {
            Communicator c(one);
            TfRecordSource src(c, {base});
            v = detail::dataset_fingerprint(c, src, src.num_samples(), 0, FingerprintLevel::full);
            src.close();
            c.free();
            MPI_Comm_free(&one);
        }
        return comm.broadcast(v, 0);
    }()) << "full does not depend on the world size";
    comm.free();
}

TEST(Fingerprint, RestoreComparesAtTheLevelOfTheState) {
    Communicator comm(MPI_COMM_WORLD);
    const std::string dir = tfrecord_test::shared_tmp_dir(comm);
    const std::string base = write_variant(comm, dir, Edit::none);
    const std::string flipped = write_variant(comm, dir, Edit::flip_byte);
    LoaderOptions o;
    o.plan.batch_size = 16;
    o.plan.sharding = Sharding::global;
    o.plan.shuffle = Shuffle::global;
    o.delivery.pin_memory = false;
    o.pipeline.io_threads = 0;
    LoaderOptions full = o;
    full.safety.fingerprint = FingerprintLevel::full;
    LoaderState saved_full;
    LoaderState saved_sampled;
    {
        Hdf5Source src(comm, base);
        saved_full = Loader(comm, src, full).state();
        saved_sampled = Loader(comm, src, o).state();
        EXPECT_EQ(saved_full.fingerprint_level, FingerprintLevel::full);
        // A sampled state restored by a loader asking for full is checked at sampled.
        EXPECT_NO_THROW(Loader::restore(comm, src, full, saved_sampled));
        src.close();
    }
    Hdf5Source src(comm, flipped);
    H5T_EXPECT_SAME_ERROR(ConfigError, Loader::restore(comm, src, o, saved_full), "another dataset",
                          "(full)");
    src.close();
    comm.free();
}

}  // namespace
