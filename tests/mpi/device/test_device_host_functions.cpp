// No CUDA call inside a CUDA host function (issue 39, bug 5): the copy stream's host functions
// return ring slots lent to copies, and a lease used to hold the ring itself, so when an epoch
// ended early (copies still in flight) and the next epoch reallocated the ring (budget batches
// larger than its slots), the host function dropped the old ring's last reference and
// cudaFreeHost ran inside it: a documented deadlock of the runtime. The CUDA test double
// counts every call made from a host function.
#include <mpi.h>

#include <cstring>

#include "device_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"

namespace {

using namespace mpistage;

/// Samples of very different sizes (a ragged field of 1 or 300 bytes), so that a byte budget's
/// largest batch changes from epoch to epoch and later epochs reallocate the ring.
class MixedSource final : public Source {
public:
    explicit MixedSource(std::uint64_t n) : n_(n) {
        FieldInfo f;
        f.name = "payload";
        f.dtype = DType::uint8;
        f.ragged = true;
        fields_ = {f};
    }
    static std::size_t len(std::uint64_t id) { return (id * 2654435761u) % 3 == 0 ? 300 : 1; }
    const std::vector<FieldInfo>& fields() const override { return fields_; }
    std::uint64_t num_samples() const override { return n_; }
    std::uint64_t records_in_cut(int rank, int world_size) const override {
        const auto w = static_cast<std::uint64_t>(world_size);
        const auto r = static_cast<std::uint64_t>(rank);
        return (r + 1) * n_ / w - r * n_ / w;
    }
    std::string fingerprint() const override { return "mixed:" + std::to_string(n_); }
    std::uint64_t sample_bytes(std::uint64_t id) const override { return len(id); }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        for (std::size_t j = 0; j < count; ++j) {
            std::byte* p = sink.ragged(0, j, len(ids[j]));
            std::memset(p, static_cast<int>(ids[j] & 0x7F), len(ids[j]));
        }
    }

private:
    std::uint64_t n_;
    std::vector<FieldInfo> fields_;
};

TEST(DeviceHostFunctions, NoCudaCallInsideAHostFunctionWhenTheRingIsReallocated) {
    ASSERT_EQ(mpistage_fake_cuda_active(), 1);
    Communicator comm(MPI_COMM_WORLD);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    // Slow copies: the early end of each epoch leaves its lent slots in flight.
    mpistage_fake_cuda_set_copy_delay_us(20000);
    MixedSource source(600);
    LoaderOptions o;
    o.delivery.device = "cuda";
    o.plan.shuffle = Shuffle::global;
    o.plan.sharding = Sharding::global;
    o.plan.budget.batch_bytes = 1200;
    o.plan.budget.max_batch_samples = 512;
    o.pipeline.prefetch = 3;
    o.pipeline.io_threads = 1;
    o.delivery.cuda_stream = stream;
    const unsigned long long before = mpistage_fake_cuda_calls_in_host_functions();
    {
        Loader loader(comm, source, o);
        ASSERT_TRUE(loader.stats().device.cuda);
        for (std::uint64_t e = 0; e < 12; ++e) {
            // Every rank leaves the epoch after 2 batches, its last copies still queued (a
            // range left early does not wait for them).
            std::uint64_t steps = 0;
            for (const HostBatch& b : loader.epoch(e)) {
                (void)b;
                if (++steps == 2) break;
            }
        }
    }
    mpistage_fake_cuda_drain();
    mpistage_fake_cuda_set_copy_delay_us(3000);
    EXPECT_EQ(mpistage_fake_cuda_calls_in_host_functions(), before)
        << "a host function made a CUDA call (the last reference of a pinned ring dropped in it)";
    cudaStreamDestroy(stream);
}

}  // namespace
