// The Loader end to end over HDF5 files: exactly once, equal steps, masked/padded slots, data of
// every slot equal to its row (checked against h5dump for chosen sample ids), batches that stay
// valid after the next one arrives; over batch sizes, remainder policies, shuffles, prefetch
// depths and I/O thread counts.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <map>
#include <set>
#include <iostream>
#include <sstream>

#include "../hdf5_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/loader.hpp"
#include "loader_test_util.hpp"

using namespace mpistage;
using namespace loader_test;


// The generated files' rows are what h5dump says (the writer is checked by an independent reader
// before any loader result is compared with the generating function).
TEST(LoaderHdf5, GeneratedFilesMatchH5dump) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    const std::uint64_t n = h5t::kGeneratedRows;
    for (const auto& file : {files.generated_contiguous, files.generated_chunked}) {
        const auto rows = h5dump_rows(file, {0, 1, 77, n - 2, n - 1});
        for (const auto& [id, row] : rows) {
            EXPECT_TRUE(row.image.size() == h5t::kPixels && generated_row_ok(id, row.image.data(), row.label))
                << file << " row " << id;
        }
    }
}

// Every combination of B x remainder x shuffle x prefetch x io_threads on the contiguous file
// (pread fast path, big-endian labels swapped), and a rotating subset on the chunked gzip file
// (H5Dread path), served by tier `stage`; with `ranks_per_node` > 0 the memory tier treats
// groups of ranks as nodes (MPI_Get between them). `every` > 1 runs every `every`-th combination.
namespace {

void sweep_exactly_once(Stage stage, int ranks_per_node, std::uint64_t every) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    const std::uint64_t n = h5t::kGeneratedRows;
    const std::vector<std::uint64_t> dump_ids = {0, 1, 38, 39, 40, 77, 78, 117, 118, n - 2, n - 1};
    const auto dumped_contig = h5dump_rows(files.generated_contiguous, dump_ids);
    const auto dumped_chunked = h5dump_rows(files.generated_chunked, dump_ids);
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source contiguous(comm, files.generated_contiguous);
    Hdf5Source chunked(comm, files.generated_chunked);
    EXPECT_FALSE(contiguous.reads_use_mpi());
    EXPECT_TRUE(chunked.reads_use_mpi());
    ASSERT_EQ(contiguous.num_samples(), n);
    ASSERT_EQ(chunked.num_samples(), n);
    ASSERT_EQ(contiguous.fields().size(), 2u);  // discovered: images, labels (name order)

    const std::vector<std::uint64_t> batches = {1, 5, 16};
    const std::vector<Remainder> rems = {Remainder::drop, Remainder::pad, Remainder::mask};
    const std::vector<std::pair<Sharding, Shuffle>> orders = {
        {Sharding::byte_range, Shuffle::none}, {Sharding::byte_range, Shuffle::local},
        {Sharding::global, Shuffle::global}};
    std::uint64_t index = 0;
    for (const auto b : batches) {
        for (const auto rem : rems) {
            for (const auto& [sharding, shuffle] : orders) {
                for (std::size_t prefetch = 1; prefetch <= 3; ++prefetch) {
                    for (std::size_t threads = 0; threads <= 2; ++threads) {
                        const std::uint64_t this_index = index++;
                        if (this_index % every != 0) continue;
                        const bool use_chunked = (this_index / every % 5) == 0;
                        const Source& src = use_chunked ? static_cast<const Source&>(chunked) : contiguous;
                        Config c{b, rem, sharding, shuffle, prefetch, threads, stage, ranks_per_node};
                        const std::string what = c.str() + (use_chunked ? " chunked-gzip" : " contiguous");
                        Loader loader(comm, src, c.options());
                        const std::string tier = stage == Stage::memory ? "memory" : "file";
                        EXPECT_EQ(loader.stats().tier, tier) << what;
                        BatchChecker chk{rem, b, n, generated_row_ok, use_chunked ? &dumped_chunked : &dumped_contig, what};
                        // Two epochs when shuffling (different order, each exactly once).
                        const std::uint64_t epochs = shuffle == Shuffle::none ? 1 : 2;
                        std::vector<std::int64_t> first_order;
                        for (std::uint64_t e = 0; e < epochs; ++e) {
                            const std::uint64_t before = chk.dump_checks;
                            const auto o = consume_epoch(loader, e, chk, prefetch >= 2);
                            const std::string we = what + " epoch " + std::to_string(e);
                            check_epoch_collectively(loader, o, c, n, we);
                            if (rem != Remainder::drop) {
                                // Each h5dump-checked id was staged exactly once as a valid sample.
                                EXPECT_EQ(h5t::sum(chk.dump_checks - before), dump_ids.size()) << we;
                            }
                            if (e == 0) {
                                first_order = o.valid_ids;
                            } else {
                                const bool same = h5t::min(first_order == o.valid_ids ? 1 : 0) == 1;
                                const bool long_enough = h5t::min(first_order.size()) > 4;
                                EXPECT_FALSE(same && long_enough) << we << ": same order as epoch 0";
                            }
                        }
                        EXPECT_EQ(h5t::sum(chk.problems), 0u) << what;
                    }
                }
            }
        }
    }
    chunked.close();
    contiguous.close();
    comm.free();
}

}  // namespace

TEST(LoaderHdf5, SweepExactlyOnceEqualStepsAndRowData) {
    sweep_exactly_once(Stage::none, 0, 1);
}

// The same sweep served from the memory tier (issue "Stage the data"): shared-memory loads.
TEST(LoaderHdf5, SweepExactlyOnceEqualStepsAndRowDataStagedInMemory) {
    sweep_exactly_once(Stage::memory, 0, 1);
}

// The memory tier with every rank its own "node": every sample of another rank's shard comes
// by MPI_Get (passive target), from I/O threads too (the tests run with MPI_THREAD_MULTIPLE).
TEST(LoaderHdf5, SweepExactlyOnceEqualStepsAndRowDataStagedAcrossNodes) {
    sweep_exactly_once(Stage::memory, 1, 1);
}

// Acceptance: "a tensor staged for sample i equals row i read with h5dump", on real data
// (Fashion-MNIST t10k converted to HDF5), every slot also against the IDX bytes (zlib + ifstream).
TEST(LoaderHdf5, FashionMnistRowsEqualH5dumpAndIdx) {
    auto& files = h5t::shared_files();
    ASSERT_TRUE(files.ok);
    if (h5t::rank() == 0) std::cout << "[ info ] fashion_t10k.h5 made with " << files.fashion_how << std::endl;
    const std::string images_idx = h5t::read_file(files.fashion_images_idx);
    const std::string labels_idx = h5t::read_file(files.fashion_labels_idx);
    constexpr std::uint64_t n = 10000;
    EXPECT_EQ(images_idx.size(), 16 + n * h5t::kPixels);
    EXPECT_EQ(labels_idx.size(), 8 + n);
    const bool idx_ok = images_idx.size() == 16 + n * h5t::kPixels && labels_idx.size() == 8 + n;
    const std::vector<std::uint64_t> dump_ids = {0, 1, 2, 1234, 4999, 5000, 7777, 9998, 9999};
    const auto dumped = h5dump_rows(files.fashion_h5, dump_ids);
    // h5dump's rows equal the IDX bytes too (so the converted file is right).
    for (const auto& [id, row] : dumped) {
        if (!idx_ok) break;
        EXPECT_TRUE(std::equal(row.image.begin(), row.image.end(),
                               reinterpret_cast<const std::uint8_t*>(images_idx.data()) + 16 + id * h5t::kPixels))
            << "h5dump row " << id << " differs from the IDX file";
        EXPECT_EQ(row.label, static_cast<unsigned char>(labels_idx[8 + id])) << id;
    }
    auto idx_row_ok = [&](std::int64_t id, const std::uint8_t* image, std::int64_t label) {
        if (!idx_ok) return true;
        const auto* want = reinterpret_cast<const std::uint8_t*>(images_idx.data()) + 16 + id * h5t::kPixels;
        return std::equal(want, want + h5t::kPixels, image) &&
               label == static_cast<unsigned char>(labels_idx[8 + id]);
    };
    Communicator comm(MPI_COMM_WORLD);
    Hdf5Source src(comm, files.fashion_h5, [] { Hdf5Options o; o.fields = {"images", "labels"}; return o; }());
    ASSERT_EQ(src.num_samples(), n);
    EXPECT_EQ(src.fields()[0].sample_shape, (std::vector<std::int64_t>{28, 28}));
    EXPECT_EQ(src.fields()[0].dtype, DType::uint8);
    EXPECT_EQ(src.fields()[1].dtype, DType::uint8);
    const std::vector<Config> configs = {
        {64, Remainder::mask, Sharding::byte_range, Shuffle::local, 3, 2},
        {100, Remainder::pad, Sharding::global, Shuffle::global, 2, 1},
        {333, Remainder::drop, Sharding::byte_range, Shuffle::none, 2, 0},
    };
    std::vector<Config> all_configs = configs;
    for (const auto& c : configs) {  // the same configurations served from the memory tier
        Config staged = c;
        staged.stage = Stage::memory;
        all_configs.push_back(staged);
    }
    for (const auto& c : all_configs) {
        Loader loader(comm, src, c.options());
        BatchChecker chk{c.remainder, c.batch, n, idx_row_ok, &dumped, c.str() + " fashion"};
        const auto o = consume_epoch(loader, 3, chk, true);
        check_epoch_collectively(loader, o, c, n, chk.what);
        EXPECT_EQ(h5t::sum(chk.problems), 0u) << chk.what;
        if (c.remainder != Remainder::drop) {
            EXPECT_EQ(h5t::sum(chk.dump_checks), dump_ids.size()) << chk.what << ": every dumped id once";
        }
    }
    src.close();
    comm.free();
}
