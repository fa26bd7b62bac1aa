// The library's open_source (mpistage/open.hpp): format detection from the file itself or its
// name, the agreed open of each format, and errors that are the same on every rank. Rank 0
// writes the files: the IDX bytes by hand, HDF5 and TFRecord with the converter.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mpistage/convert.hpp"
#include "mpistage/error.hpp"
#include "mpistage/open.hpp"
#include "temp_dirs.hpp"

using namespace mpistage;

namespace {

constexpr std::uint64_t kN = 5;

struct Files {
    std::string dir, images, labels, h5, h5_unnamed, tfr;
};

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
}

// Written once per process by rank 0 (a directory named by rank 0's pid).
const Files& files() {
    static const Files f = [] {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        long id = static_cast<long>(getpid());
        MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        Files out;
        out.dir = "/tmp/mpistage-open-" + std::to_string(id);
        out.images = out.dir + "/images-idx3-ubyte";
        out.labels = out.dir + "/labels-idx1-ubyte";
        out.h5 = out.dir + "/data.h5";
        out.h5_unnamed = out.dir + "/data.bin";  // HDF5 by its signature only
        out.tfr = out.dir + "/data.tfrecord";
        int ok = 1;
        if (rank == 0) {
            try {
                std::filesystem::create_directories(out.dir);
                mpistage_test::remove_at_exit(out.dir);
                // IDX: magic 0 0 type ndims, big-endian dims, data. Images [5, 2, 3] uint8.
                std::vector<std::uint8_t> images = {0, 0, 8, 3, 0, 0, 0, kN,
                                                    0, 0, 0, 2, 0, 0, 0, 3};
                for (std::uint8_t v = 0; v < kN * 6; ++v) images.push_back(v);
                std::vector<std::uint8_t> labels = {0, 0, 8, 1, 0, 0, 0, kN, 9, 8, 7, 6, 5};
                write_bytes(out.images, images);
                write_bytes(out.labels, labels);
                const IdxArray im = read_idx_any(out.images);
                const IdxArray lb = read_idx_any(out.labels);
                write_idx_hdf5(im, lb, out.h5, 2, 1);  // chunked, gzip: the checked path
                write_idx_hdf5(im, lb, out.h5_unnamed, 0, 0);
                write_idx_tfrecord(im, lb, out.tfr);
            } catch (const std::exception& e) {
                ADD_FAILURE() << e.what();
                ok = 0;
            }
        }
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!ok) throw std::runtime_error("writing the test files failed on rank 0");
        return out;
    }();
    return f;
}

std::vector<std::string> field_names(const Source& s) {
    std::vector<std::string> out;
    for (const auto& f : s.fields()) out.push_back(f.name);
    return out;
}

/// The message of the exception `fn` throws as `E` ("" when it throws nothing).
template <class E, class Fn>
std::string error_of(Fn&& fn) {
    try {
        fn();
    } catch (const E& e) {
        return e.what();
    }
    return "";
}

/// True on every rank when `text` is the same on every rank.
bool same_everywhere(const std::string& text) {
    const Communicator comm(MPI_COMM_WORLD);
    const std::string root = comm.broadcast(text, 0);
    return comm.allreduce_min(root == text ? 1 : 0) == 1;
}

}  // namespace

TEST(OpenSource, DetectsTheFormatFromTheFileThenTheName) {
    const Files& f = files();
    EXPECT_EQ(detect_source_format(f.h5), SourceFormat::hdf5);
    EXPECT_EQ(detect_source_format(f.h5_unnamed), SourceFormat::hdf5);
    EXPECT_EQ(detect_source_format(f.images), SourceFormat::idx);
    EXPECT_EQ(detect_source_format(f.tfr), SourceFormat::tfrecord);
    EXPECT_EQ(to_string(SourceFormat::automatic), "auto");
    EXPECT_THROW(detect_source_format(f.dir + "/missing.h5"), IoError);
    EXPECT_THROW(detect_source_format(f.dir), ConfigError);  // a directory
}

TEST(OpenSource, OpensEachFormatDetected) {
    const Files& f = files();
    const Communicator comm(MPI_COMM_WORLD);
    const auto h5 = open_source(comm, {f.h5_unnamed});
    EXPECT_EQ(h5->num_samples(), kN);
    EXPECT_EQ(field_names(*h5), (std::vector<std::string>{"images", "labels"}));

    OpenOptions idx;
    idx.fields = {"x"};  // the second path is named field1
    const auto raw = open_source(comm, {f.images, f.labels}, idx);
    EXPECT_EQ(raw->num_samples(), kN);
    EXPECT_EQ(field_names(*raw), (std::vector<std::string>{"x", "field1"}));
    EXPECT_EQ(raw->fields()[0].sample_shape, (std::vector<std::int64_t>{2, 3}));

    OpenOptions tfr;
    tfr.features = {parse_feature_spec("image:bytes/uint8:2x3"), parse_feature_spec("label:int64")};
    const auto tf = open_source(comm, {f.tfr}, tfr);
    EXPECT_EQ(tf->num_samples(), kN);
    EXPECT_EQ(field_names(*tf), (std::vector<std::string>{"image", "label"}));

    // An explicit format is not second-guessed: the HDF5 file as IDX fails in the IDX reader.
    OpenOptions as_idx;
    as_idx.format = SourceFormat::idx;
    const std::string msg = error_of<FormatError>([&] { open_source(comm, {f.h5}, as_idx); });
    EXPECT_NE(msg.find(f.h5), std::string::npos) << msg;
    EXPECT_TRUE(same_everywhere(msg));
}

TEST(OpenSource, ErrorsAreTheSameOnEveryRank) {
    const Files& f = files();
    const Communicator comm(MPI_COMM_WORLD);
    const std::string missing =
        error_of<IoError>([&] { open_source(comm, {f.dir + "/nothing.h5"}); });
    EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
    EXPECT_TRUE(same_everywhere(missing));

    const std::string two = error_of<ConfigError>([&] { open_source(comm, {f.h5, f.h5}); });
    EXPECT_NE(two.find("the HDF5 source reads one file; got 2"), std::string::npos) << two;
    EXPECT_TRUE(same_everywhere(two));

    const std::string none = error_of<ConfigError>([&] { open_source(comm, {}); });
    EXPECT_NE(none.find("no paths"), std::string::npos) << none;
    EXPECT_TRUE(same_everywhere(none));

    if (comm.size() > 1) {
        // The last rank opens TFRecord where the others open HDF5: agreed before any open.
        const bool last = comm.rank() == comm.size() - 1;
        const std::string differ =
            error_of<ConfigError>([&] { open_source(comm, {last ? f.tfr : f.h5}); });
        EXPECT_NE(differ.find("ranks disagree"), std::string::npos) << differ;
        EXPECT_NE(differ.find("'hdf5' on rank 0 but 'tfrecord' on rank"), std::string::npos)
            << differ;
        EXPECT_TRUE(same_everywhere(differ));
    }
}
