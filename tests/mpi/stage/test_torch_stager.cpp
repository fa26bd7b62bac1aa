// TorchStager over a loader on the CPU path (no GPU needed): the overlap pattern stages every
// sample exactly once with the generated file's known pixels, earlier batches' tensors stay
// valid, depth is bounded, and the device option is checked on every rank.
#include "mpistage/config.hpp"

#if MPISTAGE_HAVE_TORCH

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "h5t_files.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/torch.hpp"

using namespace mpistage;

namespace {

// `prefetch` ring slots: the stager's pending batches and the batches the test keeps hold one
// each on the CPU path.
LoaderOptions cpu_options(std::uint64_t batch_size, std::size_t prefetch) {
    LoaderOptions o;
    o.plan.batch_size = batch_size;
    o.plan.remainder = Remainder::mask;
    o.prefetch = prefetch;
    o.io_threads = 1;
    o.device = "cpu";
    return o;
}

// Problems in one staged batch: valid slots must hold gen_pixel(id, k) and gen_label(id).
std::uint64_t check_rows(const TorchBatch& t, std::vector<std::int64_t>& valid_ids) {
    std::uint64_t problems = 0;
    const auto images = t["images"].reshape({t.index.size(0), -1});
    const auto* idx = t.index.data_ptr<std::int64_t>();
    const auto* valid = t.valid.data_ptr<bool>();
    for (std::int64_t s = 0; s < t.index.size(0); ++s) {
        if (!valid[s]) continue;
        valid_ids.push_back(idx[s]);
        const auto* px = images[s].data_ptr<std::uint8_t>();
        const auto id = static_cast<std::uint64_t>(idx[s]);
        for (std::size_t k = 0; k < h5t::kPixels; ++k) problems += px[k] != h5t::gen_pixel(id, k);
        problems += t["labels"][s].item<std::int64_t>() != h5t::gen_label(id);
    }
    return problems;
}

}  // namespace

TEST(TorchStager, OverlapPatternStagesEverySampleOnceOnTheCpu) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    Loader loader(comm, src, cpu_options(4, 3));  // one pending, the first kept, one read
    EXPECT_FALSE(loader.stats().device.cuda);
    EXPECT_FALSE(loader.stats().pinned);
    TorchStager stager(loader);
    EXPECT_EQ(stager.device().name(), "cpu");
    std::vector<std::int64_t> ids;
    std::uint64_t problems = 0;
    std::uint64_t batches = 0;
    TorchBatch first;
    torch::Tensor first_images;
    const auto consume = [&](TorchBatch t) {
        problems += check_rows(t, ids);
        EXPECT_EQ(t["images"].device().type(), torch::kCPU);
        if (batches++ == 0) {
            first = t;
            first_images = t["images"].clone();
        }
    };
    for (const HostBatch& batch : loader.epoch(0)) {
        stager.submit(batch);
        if (stager.pending() > 1) consume(stager.take());
    }
    while (stager.pending() > 0) consume(stager.take());
    EXPECT_EQ(problems, 0u);
    EXPECT_TRUE(h5t::same_on_all_ranks(batches));
    EXPECT_EQ(stager.stats().batches, batches);
    EXPECT_EQ(stager.stats().bytes_copied, 0u);
    if (batches > 0) EXPECT_TRUE(torch::equal(first["images"], first_images));
    const auto all = h5t::allgatherv(ids);
    EXPECT_EQ(all.size(), h5t::kGeneratedRows);
    EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(), h5t::kGeneratedRows);
    src.close();
    comm.free();
}

TEST(TorchStager, DepthIsBoundedAndTakeNeedsASubmit) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    Loader loader(comm, src, cpu_options(2, 4));  // 157 rows: >= 19 steps per rank at 4 ranks
    TorchStager stager(DeviceChoice{}, true, 2);
    EXPECT_THROW(stager.take(), ConfigError);
    std::uint64_t step = 0;
    std::uint64_t refused = 0;
    for (const HostBatch& batch : loader.epoch(0)) {
        if (step++ < 3) {
            try {
                stager.submit(batch);
            } catch (const ConfigError&) {
                ++refused;
            }
        }
    }
    EXPECT_EQ(refused, 1u);  // the third submit, with two pending
    EXPECT_EQ(stager.pending(), 2u);
    src.close();
    comm.free();
}

TEST(TorchStager, BadDeviceOptionIsAConfigErrorOnEveryRank) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.generated_contiguous);
    LoaderOptions o = cpu_options(4, 2);
    o.device = "gpu0";
    try {
        Loader loader(comm, src, o);
        ADD_FAILURE() << "device gpu0 was accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("'gpu0'"), std::string::npos) << e.what();
    }
    src.close();
    comm.free();
}

#endif  // MPISTAGE_HAVE_TORCH
