// Torch view of batches from an HDF5 file (Fashion-MNIST t10k converted): shapes and dtypes,
// tensors equal to h5dump's rows, tensors that stay valid after the next batch arrives.
#include "mpistage/config.hpp"

#if MPISTAGE_HAVE_TORCH

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "h5t_files.hpp"
#include "h5t_h5dump.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/torch.hpp"

using namespace mpistage;

namespace {

/// Row id -> (image bytes, label) as h5dump prints them.
using DumpedRows = std::map<std::int64_t, std::pair<std::vector<std::uint8_t>, std::int64_t>>;

/// Collective: the rows `dump_ids` of the images and labels of `file`, from h5dump on rank 0.
DumpedRows dump_rows(const std::string& file, const std::vector<std::uint64_t>& dump_ids) {
    DumpedRows dumped;
    for (const auto id : dump_ids) {
        auto img = h5t::parse_as<std::uint8_t>(
            h5t::h5dump_values(file, "images", {id, 0, 0}, {1, 28, 28}));
        auto lab = h5t::parse_as<std::int64_t>(h5t::h5dump_values(file, "labels", {id}, {1}));
        EXPECT_EQ(img.size(), h5t::kPixels);
        EXPECT_EQ(lab.size(), 1u);
        dumped[static_cast<std::int64_t>(id)] = {img, lab.empty() ? -1 : lab[0]};
    }
    return dumped;
}

/// What one epoch of TorchBatches showed: batches seen, dumped rows checked, problems found and
/// the ids of the valid slots.
struct EpochCheck {
    std::uint64_t checked = 0, problems = 0, batches = 0;
    std::vector<std::int64_t> valid_ids;
};

/// The shapes and dtypes of one batch of `b` Fashion-MNIST samples.
void expect_batch_layout(const TorchBatch& t, std::int64_t b) {
    EXPECT_EQ(t.names, (std::vector<std::string>{"images", "labels"}));
    const auto& images = t["images"];
    const auto& labels = t["labels"];
    EXPECT_EQ(images.sizes(), (std::vector<std::int64_t>{b, 28, 28}));
    EXPECT_EQ(images.scalar_type(), torch::kUInt8);
    EXPECT_EQ(labels.sizes(), (std::vector<std::int64_t>{b}));
    EXPECT_EQ(labels.scalar_type(), torch::kUInt8);
    EXPECT_EQ(t.index.scalar_type(), torch::kInt64);
    EXPECT_EQ(t.valid.scalar_type(), torch::kBool);
    EXPECT_EQ(t.index.sizes(), (std::vector<std::int64_t>{b}));
    EXPECT_EQ(t.valid.sizes(), (std::vector<std::int64_t>{b}));
    EXPECT_TRUE(images.is_contiguous());
    EXPECT_EQ(images.device().type(), torch::kCPU);
}

/// Compares the slots of one batch with the dumped rows; masked slots must be -1 and zero.
void check_batch_rows(const TorchBatch& t, std::int64_t b, Remainder rem, DumpedRows& dumped,
                      EpochCheck& ec) {
    const auto& images = t["images"];
    const auto& labels = t["labels"];
    const auto* idx = t.index.data_ptr<std::int64_t>();
    const auto* valid = t.valid.data_ptr<bool>();
    for (std::int64_t s = 0; s < b; ++s) {
        if (valid[s]) ec.valid_ids.push_back(idx[s]);
        if (!valid[s] && rem == Remainder::mask) {
            ec.problems += idx[s] != -1;
            ec.problems += images[s].sum().item<std::int64_t>() != 0;
            continue;
        }
        const auto it = dumped.find(idx[s]);
        if (it == dumped.end()) continue;
        const auto row = images[s].flatten();
        const auto want = torch::from_blob(it->second.first.data(), {784}, torch::kUInt8);
        if (it->second.first.size() != 784 || !torch::equal(row, want)) ++ec.problems;
        if (labels[s].item<std::int64_t>() != it->second.second) ++ec.problems;
        if (valid[s]) ++ec.checked;
    }
}

/// Runs epoch 0 of `loader`, converting every batch to tensors that alone keep the slot alive,
/// and checks that the previous batch's tensors are still intact after the next one arrived.
void run_epoch(Loader& loader, std::int64_t b, Remainder rem, DumpedRows& dumped, EpochCheck& ec) {
    auto range = loader.epoch(0);
    HostBatch hb;
    TorchBatch prev;
    torch::Tensor prev_images_copy, prev_index_copy;
    while (range.next(hb)) {
        ++ec.batches;
        TorchBatch t = to_torch(hb);
        hb = HostBatch();  // only the tensors keep the slot alive now
        expect_batch_layout(t, b);
        check_batch_rows(t, b, rem, dumped, ec);
        const auto& images = t["images"];
        // The previous batch's tensors are still intact after this one arrived.
        if (prev.tensors.size() == 2) {
            if (!torch::equal(prev["images"], prev_images_copy)) ++ec.problems;
            if (!torch::equal(prev.index, prev_index_copy)) ++ec.problems;
            if (prev["images"].data_ptr() == images.data_ptr()) ++ec.problems;
        }
        prev = t;
        prev_images_copy = images.clone();
        prev_index_copy = t.index.clone();
    }
}

}  // namespace

TEST(TorchHdf5, TensorsEqualH5dumpRowsAndOutliveNextBatch) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    const std::string file = files.fashion_h5;
    const std::vector<std::uint64_t> dump_ids = {0, 3, 999, 5001, 6543, 9999};
    DumpedRows dumped = dump_rows(file, dump_ids);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Options ho;
    ho.fields = {"images", "labels"};
    Hdf5Source src(comm, file, ho);
    ASSERT_EQ(src.num_samples(), 10000u);
    for (const auto rem : {Remainder::mask, Remainder::pad}) {
        LoaderOptions o;
        o.plan.batch_size = 50;
        o.plan.remainder = rem;
        o.plan.shuffle = Shuffle::local;
        o.plan.seed = 99;
        o.pipeline.prefetch = 2;
        o.pipeline.io_threads = 2;
        Loader loader(comm, src, o);
        const std::int64_t b = 50;
        EpochCheck ec;
        std::string error;
        try {
            run_epoch(loader, b, rem, dumped, ec);
        } catch (const std::exception& e) {
            error = e.what();
        }
        EXPECT_EQ(error, "");
        EXPECT_EQ(ec.problems, 0u) << to_string(rem);
        EXPECT_TRUE(h5t::same_on_all_ranks(ec.batches));
        EXPECT_EQ(h5t::sum(ec.checked), dump_ids.size()) << "each h5dump row staged once as valid";
        const auto all = h5t::allgatherv(ec.valid_ids);
        EXPECT_EQ(all.size(), 10000u);
        EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), 10000u);
    }
    src.close();
    comm.free();
}

// Tensors outlive the loader and its epoch: the ring slot is freed only with the last tensor.
TEST(TorchHdf5, TensorsOutliveLoader) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    torch::Tensor images, index;
    {
        LoaderOptions o;
        o.plan.batch_size = 3;
        o.plan.remainder = Remainder::mask;
        o.pipeline.prefetch = 2;
        o.pipeline.io_threads = 1;
        Loader loader(comm, src, o);
        auto range = loader.epoch(0);
        HostBatch hb;
        ASSERT_TRUE(range.next(hb));  // steps >= 1 on every rank
        TorchBatch t = to_torch(hb);
        images = t["images"];
        index = t.index;
        EXPECT_EQ(t["labels"].scalar_type(), torch::kInt64);
        while (range.next(hb)) {
        }
    }
    for (std::int64_t s = 0; s < 3; ++s) {
        const std::int64_t id = index[s].item<std::int64_t>();
        if (id < 0) continue;
        for (std::size_t k = 0; k < h5t::kPixels; k += 97) {
            EXPECT_EQ(images[s].flatten()[static_cast<std::int64_t>(k)].item<std::uint8_t>(),
                      h5t::gen_pixel(static_cast<std::uint64_t>(id), k));
        }
    }
    images = torch::Tensor();
    index = torch::Tensor();
    src.close();
    comm.free();
}

#endif  // MPISTAGE_HAVE_TORCH
