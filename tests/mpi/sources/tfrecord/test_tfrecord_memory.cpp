// TFRecord descriptors cost a rank its share of the node's window, not all N (tfrecord_source.hpp,
// "Memory"): at W = 4 on one node, opening 2 × 10^6 one-byte records and taking a few batches
// raises a rank's peak resident memory by less than the 16 B × N that every rank held when each
// kept all descriptors (32 MB here; expected now: its quarter of the window, 8 MB, plus the
// records its scan found while they are copied in, ≤ 16 MB with the vector's slack).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../../tfrecord_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "peak_rss.hpp"
#include "sources/tfrecord/framing.hpp"

using namespace mpistage;
using mpistage::testing::reset_peak;
using mpistage::testing::rss_measures_the_code;
using mpistage::testing::status_bytes;

TEST(TfRecordMemory, DescriptorsAreHeldOncePerNode) {
    Communicator comm(MPI_COMM_WORLD);
    comm.split_node();  // collective, on every rank: the node size below
    if (comm.size() < 4 || comm.node_size() != comm.size()) {
        GTEST_SKIP() << "needs 4 or more ranks on one node";
    }
    constexpr std::uint64_t kRecords = 2000000;
    const std::string path = tfrecord_test::shared_tmp_dir(comm) + "/tiny.tfrecord";
    if (comm.rank() == 0) {
        std::vector<std::uint8_t> bytes;
        bytes.reserve(kRecords * (1 + tfrecord::kFramingBytes));
        for (std::uint64_t i = 0; i < kRecords; ++i) {
            const auto b = static_cast<std::uint8_t>(i);
            tfrecord::append_record(bytes, &b, 1);
        }
        tfrecord_test::spit(path, bytes);
    }
    comm.barrier();
    // Under the sanitizers the records and batches still go through the shared window, but the
    // growth is not compared (peak_rss.hpp).
    const bool peaks =
        comm.allreduce_min(
            rss_measures_the_code() && reset_peak() && status_bytes("VmHWM") > 0 ? 1 : 0) == 1;
    const std::uint64_t before = status_bytes("VmRSS");
    std::uint64_t served = 0;
    {
        TfRecordSource src(comm, {path});
        EXPECT_EQ(src.num_samples(), kRecords);
        LoaderOptions o;
        o.plan.batch_size = 256;
        o.pipeline.prefetch = 2;
        o.pipeline.io_threads = 1;
        o.delivery.pin_memory = false;
        Loader loader(comm, src, o);
        auto range = loader.epoch(0);
        HostBatch b;
        for (int k = 0; k < 4 && range.next(b); ++k) served += b.num_valid();
        src.close();
    }
    EXPECT_EQ(served, 4u * 256u);
    const std::uint64_t grown = status_bytes("VmHWM") - before;
    const std::uint64_t all_descriptors = kRecords * sizeof(tfrecord::RecordRef);
    if (peaks) {
        EXPECT_LT(grown, all_descriptors)
            << "rank " << comm.rank() << " grew by " << grown << " bytes: all N descriptors ("
            << all_descriptors << " bytes) on this rank?";
    }
    comm.barrier();
    if (comm.rank() == 0) {
        std::remove(path.c_str());
        ::rmdir(path.substr(0, path.rfind('/')).c_str());
    }
    const std::uint64_t largest = comm.allreduce_max(grown);
    if (comm.rank() == 0) {
        std::printf("[ info ] largest peak growth %.1f MB for %llu descriptors (%.1f MB)\n",
                    static_cast<double>(largest) / 1e6, static_cast<unsigned long long>(kRecords),
                    static_cast<double>(all_descriptors) / 1e6);
    }
    comm.free();
}
