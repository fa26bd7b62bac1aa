// RawSource / IDX over real Fashion-MNIST (Debian dataset-fashion-mnist): headers, values
// against the decompressed bytes read independently (zlib + ifstream), and the Loader exactly once.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "h5t_checks.hpp"
#include "h5t_files.hpp"
#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/raw_source.hpp"

using namespace mpistage;

namespace {

const std::string kFm = MPISTAGE_FASHION_MNIST_DIR;

/// Collective: the decompressed Fashion-MNIST file `name`, prepared once per build tree.
std::string fashion_idx(const std::string& name, bool* ok) {
    const std::string path = h5t::fashion_file(name);
    *ok = !path.empty();
    return path;
}

unsigned char byte_at(std::ifstream& in, std::uint64_t offset) {
    in.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    in.read(&c, 1);
    return static_cast<unsigned char>(c);
}

}  // namespace

TEST(RawIdx, TrainLabelsHeaderAndValuesMatchFileBytes) {
    bool ok = false;
    const std::string path = fashion_idx("train-labels-idx1-ubyte", &ok);
    ASSERT_TRUE(ok);
    const RawField f = parse_idx_header(path, "labels");
    EXPECT_EQ(f.num_records, 60000u);
    EXPECT_EQ(f.header_bytes, 8u);
    EXPECT_EQ(f.dtype, DType::uint8);
    EXPECT_TRUE(f.sample_shape.empty());
    EXPECT_EQ(f.path, path);
    Communicator comm(MPI_COMM_WORLD);
    RawSource src(comm, {f});
    ASSERT_EQ(src.num_samples(), 60000u);
    // Every label, read in one call (ids in order) and a scattered selection in reverse.
    std::vector<std::uint64_t> all(60000);
    for (std::uint64_t i = 0; i < all.size(); ++i) all[i] = i;
    h5t::VectorSink sink(src.fields(), all.size());
    src.read(all.data(), all.size(), sink);
    const std::string bytes = h5t::read_file(path);
    ASSERT_TRUE(h5t::all_true(bytes.size() == 60008u))
        << bytes.size();  // agreed: same on all ranks
    std::vector<std::uint64_t> histogram(10, 0);
    std::uint64_t mismatches = 0, out_of_range = 0;
    for (std::uint64_t i = 0; i < 60000; ++i) {
        const auto v = sink.value<std::uint8_t>(0, i);
        if (v > 9)
            ++out_of_range;
        else
            ++histogram[v];
        if (v != static_cast<unsigned char>(bytes[8 + i])) ++mismatches;
    }
    EXPECT_EQ(out_of_range, 0u);
    EXPECT_EQ(mismatches, 0u);
    std::uint64_t classes = 0;
    for (auto c : histogram) classes += c > 0;
    EXPECT_EQ(classes, 10u);
    // Scattered ids checked against single bytes at offset 8 + i (plain ifstream).
    std::ifstream in(path, std::ios::binary);
    const std::vector<std::uint64_t> ids = {
        59999, 0, 12345, 1, 30000, 777, static_cast<std::uint64_t>(h5t::rank()) * 1001};
    h5t::VectorSink few(src.fields(), ids.size());
    src.read(ids.data(), ids.size(), few);
    for (std::size_t k = 0; k < ids.size(); ++k) {
        EXPECT_EQ(few.value<std::uint8_t>(0, k), byte_at(in, 8 + ids[k])) << "label " << ids[k];
    }
    comm.free();
}

TEST(RawIdx, ImagesHeaderGivesShapeAndGzipIsRejected) {
    h5t::TempDir dir;
    bool ok = false;
    const std::string path = fashion_idx("t10k-images-idx3-ubyte", &ok);
    ASSERT_TRUE(ok);
    const RawField f = parse_idx_header(path, "images");
    EXPECT_EQ(f.num_records, 10000u);
    EXPECT_EQ(f.header_bytes, 16u);
    EXPECT_EQ(f.sample_shape, (std::vector<std::int64_t>{28, 28}));
    EXPECT_EQ(f.dtype, DType::uint8);
    // Not collective: each rank on its own.
    const auto gz = h5t::catch_error<FormatError>(
        [&] { parse_idx_header(kFm + "/t10k-images-idx3-ubyte.gz", "images"); });
    EXPECT_TRUE(gz.right_type) << gz.message;
    EXPECT_NE(gz.message.find("gzip"), std::string::npos) << gz.message;
    const auto missing =
        h5t::catch_error<IoError>([&] { parse_idx_header(dir.file("nope-idx1-ubyte"), "x"); });
    EXPECT_TRUE(missing.right_type) << missing.message;
    // Fields with different record counts (train labels 60000 vs t10k images 10000).
    bool ok2 = false;
    const std::string labels = fashion_idx("train-labels-idx1-ubyte", &ok2);
    ASSERT_TRUE(ok2);
    Communicator comm(MPI_COMM_WORLD);
    H5T_EXPECT_SAME_ERROR(ConfigError, RawSource(comm, {f, parse_idx_header(labels, "labels")}),
                          "record count");
    comm.free();
}

// Loader over RawSource (t10k images + labels): every sample exactly once, every slot's bytes
// equal to the IDX file's bytes for its id, equal steps on every rank.
TEST(RawIdx, LoaderExactlyOnceWithFileBytes) {
    bool ok1 = false, ok2 = false;
    const std::string images = fashion_idx("t10k-images-idx3-ubyte", &ok1);
    const std::string labels = fashion_idx("t10k-labels-idx1-ubyte", &ok2);
    ASSERT_TRUE(ok1 && ok2);
    const std::string img_bytes = h5t::read_file(images);
    const std::string lab_bytes = h5t::read_file(labels);
    ASSERT_TRUE(h5t::all_true(img_bytes.size() == 16u + 10000u * 784u &&
                              lab_bytes.size() == 8u + 10000u));  // agreed: same on all ranks
    Communicator comm(MPI_COMM_WORLD);
    RawSource src(comm, {parse_idx_header(images, "images"), parse_idx_header(labels, "labels")});
    ASSERT_EQ(src.num_samples(), 10000u);
    struct C {
        std::uint64_t b;
        Remainder rem;
        Shuffle shuffle;
        Sharding sharding;
        std::size_t prefetch;
        std::size_t threads;
    };
    const std::vector<C> configs = {
        {64, Remainder::mask, Shuffle::local, Sharding::byte_range, 2, 2},
        {333, Remainder::drop, Shuffle::none, Sharding::byte_range, 1, 0},
        {128, Remainder::pad, Shuffle::global, Sharding::global, 3, 1},
    };
    // Every configuration from the files (coalesced preads) and from the memory tier.
    for (const Stage stage : {Stage::none, Stage::memory})
        for (const auto& c : configs) {
            LoaderOptions o;
            o.tier.stage = stage;
            o.plan.batch_size = c.b;
            o.plan.remainder = c.rem;
            o.plan.shuffle = c.shuffle;
            o.plan.sharding = c.sharding;
            o.pipeline.prefetch = c.prefetch;
            o.pipeline.io_threads = c.threads;
            Loader loader(comm, src, o);
            const std::string what = "B=" + std::to_string(c.b) + " " + to_string(c.rem) + " " +
                                     to_string(c.shuffle) + " stage " + to_string(stage);
            EXPECT_EQ(loader.stats().tier, stage == Stage::memory ? "memory" : "file") << what;
            std::vector<std::int64_t> ids;
            std::uint64_t batches = 0, bad = 0;
            std::string error;
            try {
                auto range = loader.epoch(1);
                HostBatch b;
                while (range.next(b)) {
                    ++batches;
                    for (std::size_t s = 0; s < b.size(); ++s) {
                        const std::int64_t id = b.index()[s];
                        if (b.valid()[s]) ids.push_back(id);
                        if (id < 0) continue;
                        const auto* img = b.fields()[0].data + s * 784;
                        const auto lab = std::to_integer<unsigned char>(b.fields()[1].data[s]);
                        bad += std::memcmp(img, img_bytes.data() + 16 + id * 784, 784) != 0;
                        bad += lab != static_cast<unsigned char>(lab_bytes[8 + id]);
                    }
                }
            } catch (const std::exception& e) {
                error = e.what();
            }
            EXPECT_EQ(error, "") << what;
            EXPECT_EQ(bad, 0u) << what;
            EXPECT_TRUE(h5t::same_on_all_ranks(batches)) << what;
            EXPECT_EQ(batches, loader.totals().steps) << what;
            const auto all = h5t::allgatherv(ids);
            const std::set<std::int64_t> distinct(all.begin(), all.end());
            EXPECT_EQ(distinct.size(), all.size()) << what;
            EXPECT_EQ(all.size(), loader.totals().valid_samples) << what;
            if (c.rem != Remainder::drop) EXPECT_EQ(all.size(), 10000u) << what;
        }
    comm.free();
}
