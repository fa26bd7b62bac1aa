// The same Fashion-MNIST sample ids give identical samples from the HDF5 copy, the TFRecord
// (tf.train.Example) copy and the original IDX bytes, read directly and through loaders.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpistage/convert.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tf_example.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "prepared_data.hpp"
#include "temp_dirs.hpp"

using namespace mpistage;

namespace {

const std::string kFmnist = mpistage_test::fashion_mnist_dir();

class VectorSink final : public BatchSink {
public:
    VectorSink(std::size_t count, const std::vector<FieldInfo>& fields) : fields_(fields) {
        for (const auto& f : fields) data_.emplace_back(count * f.sample_bytes);
    }
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        return data_[field].data() + slot * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t, std::size_t, std::uint64_t) override {
        ADD_FAILURE() << "no ragged fields expected";
        scratch_.resize(1 << 20);
        return scratch_.data();
    }
    const std::vector<std::byte>& field(std::size_t i) const { return data_[i]; }

private:
    const std::vector<FieldInfo>& fields_;
    std::vector<std::vector<std::byte>> data_;
    std::vector<std::byte> scratch_;
};

struct Copies {
    IdxArray images;
    IdxArray labels;
    std::string h5;
    std::string tfr;
};

// Rank 0 converts once per process; every rank reads the IDX arrays (reference bytes).
const Copies& copies() {
    static Copies c = [] {
        Copies out;
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        long id = static_cast<long>(getpid());
        MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        const std::string dir = "/tmp/mpistage-formats-" + std::to_string(id);
        out.h5 = dir + "/train.h5";
        out.tfr = dir + "/train.tfrecord";
        // The decompressed IDX files, prepared once per build tree by rank 0 (the other ranks
        // then find them in the cache), instead of gunzipping 47 MB on every rank.
        std::string images_idx, labels_idx;
        int have = 1;
        if (rank == 0) {
            images_idx = mpistage_test::fashion_mnist_idx("train-images-idx3-ubyte");
            labels_idx = mpistage_test::fashion_mnist_idx("train-labels-idx1-ubyte");
            have = !images_idx.empty() && !labels_idx.empty();
        }
        MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!have) throw std::runtime_error("cannot prepare Fashion-MNIST train from " + kFmnist);
        if (rank != 0) {
            images_idx = mpistage_test::fashion_mnist_idx("train-images-idx3-ubyte");
            labels_idx = mpistage_test::fashion_mnist_idx("train-labels-idx1-ubyte");
        }
        out.images = read_idx_any(images_idx);
        out.labels = read_idx_any(labels_idx);
        int ok = 1;
        if (rank == 0) {
            mpistage_test::remove_at_exit(dir);
            try {
                std::string cmd = "mkdir -p " + dir;
                ok = std::system(cmd.c_str()) == 0;
                write_idx_hdf5(out.images, out.labels, out.h5, 0, 0);
                write_idx_tfrecord(out.images, out.labels, out.tfr);
            } catch (const std::exception& e) {
                ADD_FAILURE() << e.what();
                ok = 0;
            }
        }
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!ok) throw std::runtime_error("conversion failed on rank 0");
        return out;
    }();
    return c;
}

TfRecordOptions example_options() {
    TfRecordOptions o;
    o.features = {parse_feature_spec("image:bytes/uint8:28x28"), parse_feature_spec("label:int64")};
    return o;
}

}  // namespace

TEST(FormatsAgree, DirectReadsMatchIdxBytesForEveryId) {
    const Copies& c = copies();
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options h5o;
    h5o.fields = {"images", "labels"};
    Hdf5Source h5(comm, c.h5, h5o);
    TfRecordSource tfr(comm, {c.tfr}, example_options());
    ASSERT_EQ(h5.num_samples(), 60000u);  // same on every rank
    ASSERT_EQ(tfr.num_samples(), 60000u);
    // Each rank checks every W-th id, so together the ranks cover all 60,000.
    std::vector<std::uint64_t> ids;
    for (std::uint64_t i = static_cast<std::uint64_t>(comm.rank()); i < 60000;
         i += static_cast<std::uint64_t>(comm.size())) {
        ids.push_back(i);
    }
    VectorSink hs(ids.size(), h5.fields());
    VectorSink ts(ids.size(), tfr.fields());
    h5.read(ids.data(), ids.size(), hs);
    tfr.read(ids.data(), ids.size(), ts);
    std::size_t bad_images = 0;
    std::size_t bad_labels = 0;
    for (std::size_t k = 0; k < ids.size(); ++k) {
        const auto* want = c.images.data.data() + ids[k] * 784;
        bad_images += std::memcmp(hs.field(0).data() + k * 784, want, 784) != 0;
        bad_images += std::memcmp(ts.field(0).data() + k * 784, want, 784) != 0;
        std::int64_t tf_label = 0;
        std::memcpy(&tf_label, ts.field(1).data() + k * 8, 8);
        const auto h5_label = static_cast<std::int64_t>(hs.field(1)[k]);
        bad_labels += h5_label != c.labels.data[ids[k]] || tf_label != c.labels.data[ids[k]];
    }
    EXPECT_EQ(bad_images, 0u);
    EXPECT_EQ(bad_labels, 0u);
}

TEST(FormatsAgree, LoadersGiveIdenticalSamplesForTheSameIds) {
    const Copies& c = copies();
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options h5o;
    h5o.fields = {"images", "labels"};
    Hdf5Source h5(comm, c.h5, h5o);
    TfRecordSource tfr(comm, {c.tfr}, example_options());
    LoaderOptions o;
    o.plan.batch_size = 61;
    o.plan.shuffle = Shuffle::local;
    o.plan.remainder = Remainder::mask;
    o.plan.seed = 11;
    o.pipeline.io_threads = 2;
    Loader lh(comm, h5, o);
    Loader lt(comm, tfr, o);
    auto eh = lh.epoch(1);
    auto et = lt.epoch(1);
    ASSERT_EQ(eh.steps(), et.steps());
    HostBatch bh;
    HostBatch bt;
    std::uint64_t compared = 0;
    std::uint64_t mismatches = 0;
    while (eh.next(bh)) {
        ASSERT_TRUE(et.next(bt));
        for (std::size_t j = 0; j < bh.size(); ++j) {
            ASSERT_EQ(bh.index()[j], bt.index()[j]);
            ASSERT_EQ(bh.valid()[j], bt.valid()[j]);
            if (!bh.valid()[j]) continue;
            const auto id = static_cast<std::uint64_t>(bh.index()[j]);
            const auto* want = c.images.data.data() + id * 784;
            mismatches += std::memcmp(bh.fields()[0].data + j * 784, want, 784) != 0;
            mismatches += std::memcmp(bt.fields()[0].data + j * 784, want, 784) != 0;
            std::int64_t tl = 0;
            std::memcpy(&tl, bt.fields()[1].data + j * 8, 8);
            mismatches += tl != c.labels.data[id];
            mismatches += static_cast<std::uint8_t>(bh.fields()[1].data[j]) != c.labels.data[id];
            ++compared;
        }
    }
    EXPECT_FALSE(et.next(bt));
    std::uint64_t total = 0;
    MPI_Allreduce(&compared, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total, 60000u);
    EXPECT_EQ(mismatches, 0u);
}
