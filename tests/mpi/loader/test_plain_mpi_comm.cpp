// Public constructors accept a plain MPI_Comm (issue 22, item 6): `RawSource`, `open_source` and
// `Loader` are called with MPI_COMM_WORLD (no `Communicator` object in the caller), and the
// loader still yields every sample exactly once with equal steps on every rank.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/open.hpp"
#include "mpistage/raw_source.hpp"

using namespace mpistage;

namespace {

constexpr std::uint64_t kRecords = 103;  // not a multiple of the batch or of any world size

/// Rank 0 writes a raw file of kRecords uint32 records whose value is the record id; every
/// rank then gets the same path (the pid of rank 0 makes it unique per run).
std::string write_ids_file() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int pid = static_cast<int>(::getpid());
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    const std::string path = "/tmp/mpistage_plain_comm_" + std::to_string(pid) + ".u32";
    if (rank == 0) {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        for (std::uint32_t id = 0; id < kRecords; ++id) std::fwrite(&id, sizeof id, 1, f);
        std::fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return path;
}

/// Every id of the epoch, gathered from all ranks; checks the values equal the ids.
std::vector<std::uint64_t> epoch_ids(Loader& loader, std::uint64_t* steps) {
    std::vector<int> local;
    *steps = 0;
    for (const HostBatch& batch : loader.epoch(0)) {
        ++*steps;
        const std::uint32_t* values = batch.fields().at(0).as<std::uint32_t>();
        for (std::size_t i = 0; i < batch.size(); ++i) {
            if (!batch.valid()[i]) continue;
            EXPECT_EQ(values[i], static_cast<std::uint32_t>(batch.index()[i]));
            local.push_back(static_cast<int>(batch.index()[i]));
        }
    }
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int count = static_cast<int>(local.size());
    std::vector<int> counts(static_cast<std::size_t>(size)), displs(counts.size());
    MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) displs[r] = total, total += counts[r];
    std::vector<int> all(static_cast<std::size_t>(total));
    MPI_Allgatherv(local.data(), count, MPI_INT, all.data(), counts.data(), displs.data(), MPI_INT,
                   MPI_COMM_WORLD);
    return std::vector<std::uint64_t>(all.begin(), all.end());
}

void expect_exactly_once(const std::vector<std::uint64_t>& ids, std::uint64_t steps) {
    std::vector<int> seen(kRecords, 0);
    for (std::uint64_t id : ids) {
        ASSERT_LT(id, kRecords);
        ++seen[id];
    }
    for (std::uint64_t id = 0; id < kRecords; ++id) EXPECT_EQ(seen[id], 1) << "id " << id;
    std::uint64_t max_steps = steps, min_steps = steps;
    MPI_Allreduce(MPI_IN_PLACE, &max_steps, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &min_steps, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    EXPECT_EQ(min_steps, max_steps);
}

LoaderOptions mask_options() {
    LoaderOptions options;
    options.plan.batch_size = 4;
    options.plan.remainder = Remainder::mask;
    options.delivery.pin_memory = false;
    return options;
}

}  // namespace

TEST(PlainMpiComm, SourceAndLoaderTakeMpiCommWorld) {
    const std::string path = write_ids_file();
    RawField field;
    field.name = "id";
    field.path = path;
    field.dtype = DType::uint32;
    {
        RawSource source(MPI_COMM_WORLD, {field});  // a CommRef: the source's own dup, no more
        ASSERT_EQ(source.num_samples(), kRecords);
        Loader loader(MPI_COMM_WORLD, source, mask_options());
        std::uint64_t steps = 0;
        expect_exactly_once(epoch_ids(loader, &steps), steps);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::remove(path.c_str());
}

TEST(PlainMpiComm, OpenSourceTakesMpiCommWorld) {
    // open_source's agreed error path, reached through the implicit conversion: a missing file
    // is the same IoError on every rank.
    EXPECT_THROW(open_source(MPI_COMM_WORLD, {"/nonexistent/mpistage_plain_comm.h5"}), IoError);
}
