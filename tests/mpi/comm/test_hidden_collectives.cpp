// No collective hidden in a conversion (issue 38): counts, through the MPI profiling interface,
// the communicator duplications and node splits mpistage makes for the README's sequence (a
// source and a Loader built from a plain MPI_COMM_WORLD). Each library object takes one
// MPI_Comm_dup at most; the node split (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)) is made only
// where a node window needs it, once in all. Before the fix, each implicit conversion of
// MPI_COMM_WORLD made a dup and a split, and each object one dup more.
//
// The wrappers below replace MPI_Comm_dup, MPI_Comm_split_type and MPI_Comm_split for the whole
// mpistage_mpi_comm binary; they only count and call the PMPI_ entry point, so the other comm
// tests run as before. A call counts when it comes from mpistage's own code (its return address
// lies in the object that holds mpistage): parallel HDF5 duplicates the communicator it is
// given inside H5Pset_fapl_mpio and H5Fopen, and those are HDF5's, not the library's.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "h5t_files.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/open.hpp"
#include "mpistage/raw_source.hpp"

namespace {

std::atomic<int> g_dups{0};
std::atomic<int> g_node_splits{0};  // MPI_Comm_split_type
std::atomic<int> g_splits{0};       // MPI_Comm_split (the tier's test "nodes" only)

/// True when `return_address` lies in the object (shared library or executable) that holds
/// mpistage's code.
bool from_mpistage(const void* return_address) {
    static const void* const base = [] {
        Dl_info self{};
        // A function defined in src/comm/comm.cpp: its address is in libmpistage (or in the
        // executable when mpistage is linked statically).
        const auto fn = &mpistage::check_timeout;
        if (dladdr(reinterpret_cast<const void*>(fn), &self) == 0)
            return static_cast<void*>(nullptr);
        return self.dli_fbase;
    }();
    Dl_info caller{};
    if (base == nullptr || dladdr(return_address, &caller) == 0) return false;
    return caller.dli_fbase == base;
}

struct Counts {
    int dups = 0;
    int node_splits = 0;
    int splits = 0;
};

Counts counts() {
    return {g_dups.load(), g_node_splits.load(), g_splits.load()};
}

Counts since(const Counts& before) {
    const Counts now = counts();
    return {now.dups - before.dups, now.node_splits - before.node_splits,
            now.splits - before.splits};
}

std::string describe(const Counts& c) {
    return std::to_string(c.dups) + " MPI_Comm_dup, " + std::to_string(c.node_splits) +
           " MPI_Comm_split_type, " + std::to_string(c.splits) + " MPI_Comm_split";
}

}  // namespace

// The profiling interface (MPI-4.0 §15.2): the test binary's definitions take the place of the
// MPI library's for every caller, libmpistage included; PMPI_ reaches the real call.
extern "C" int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
    if (from_mpistage(__builtin_return_address(0))) ++g_dups;
    return PMPI_Comm_dup(comm, newcomm);
}

extern "C" int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info,
                                   MPI_Comm* newcomm) {
    if (from_mpistage(__builtin_return_address(0))) ++g_node_splits;
    return PMPI_Comm_split_type(comm, split_type, key, info, newcomm);
}

extern "C" int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
    if (from_mpistage(__builtin_return_address(0))) ++g_splits;
    return PMPI_Comm_split(comm, color, key, newcomm);
}

using namespace mpistage;

namespace {

constexpr std::uint64_t kRecords = 103;

/// Collective: a raw file of kRecords uint32 records (the record id) in `dir`.
RawField ids_field(const h5t::TempDir& dir) {
    const std::string path = dir.file("ids.u32");
    if (h5t::rank() == 0) {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        for (std::uint32_t id = 0; id < kRecords; ++id) std::fwrite(&id, sizeof id, 1, f);
        std::fclose(f);
    }
    h5t::barrier();
    RawField field;
    field.name = "id";
    field.path = path;
    field.dtype = DType::uint32;
    return field;
}

/// The README's options (`{}`), with the device fixed to the CPU (`auto` on a GPU without a
/// launcher's local rank is the one place besides a node window that needs the node rank) and
/// the remainder masked (every sample counted once below).
LoaderOptions readme_options() {
    LoaderOptions o;
    o.delivery.device = "cpu";
    o.delivery.pin_memory = false;
    o.plan.remainder = Remainder::mask;
    return o;
}

/// Every sample of epoch 0, summed over the ranks (the loader works, not only builds).
std::uint64_t samples_of_epoch(Loader& loader) {
    std::uint64_t valid = 0;
    for (const HostBatch& batch : loader.epoch(0)) valid += batch.num_valid();
    return h5t::sum(valid);
}

/// The error handler of MPI_COMM_WORLD, as a handle to compare (freed here: comparing the
/// handles is what is needed).
MPI_Errhandler world_errhandler() {
    MPI_Errhandler h = MPI_ERRHANDLER_NULL;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &h);
    const MPI_Errhandler copy = h;
    MPI_Errhandler_free(&h);
    return copy;
}

}  // namespace

TEST(HiddenCollectives, ReadmeSequenceRawSource) {
    const h5t::TempDir dir;
    const RawField field = ids_field(dir);
    const MPI_Errhandler handler = world_errhandler();
    const Counts start = counts();
    {
        RawSource source(MPI_COMM_WORLD, {field});
        const Counts by_source = since(start);
        EXPECT_LE(by_source.dups, 1) << "the source: " << describe(by_source);
        EXPECT_EQ(by_source.node_splits, 0) << "the source: " << describe(by_source);
        const Counts before_loader = counts();
        Loader loader(MPI_COMM_WORLD, source, readme_options());
        const Counts by_loader = since(before_loader);
        EXPECT_LE(by_loader.dups, 1) << "the loader: " << describe(by_loader);
        EXPECT_EQ(by_loader.node_splits, 0) << "the loader: " << describe(by_loader);
        EXPECT_EQ(samples_of_epoch(loader), kRecords);
    }
    const Counts all = since(start);
    EXPECT_LE(all.dups, 2) << describe(all);
    EXPECT_EQ(all.node_splits, 0) << describe(all);
    EXPECT_EQ(all.splits, 0) << describe(all);
    EXPECT_EQ(world_errhandler(), handler) << "the caller's communicator's error handler changed";
}

TEST(HiddenCollectives, ReadmeSequenceOpenSourceHdf5) {
    const h5t::TempDir dir;
    const std::string path = dir.file("generated.h5");
    ASSERT_TRUE(h5t::make_generated_file(path, h5t::kGeneratedRows, false));
    const Counts start = counts();
    {
        // The README's four statements: open_source and a Loader from MPI_COMM_WORLD.
        auto source = open_source(MPI_COMM_WORLD, {path});
        const Counts by_source = since(start);
        EXPECT_LE(by_source.dups, 1) << "open_source: " << describe(by_source);
        EXPECT_EQ(by_source.node_splits, 0) << "open_source: " << describe(by_source);
        const Counts before_loader = counts();
        Loader loader(MPI_COMM_WORLD, *source, readme_options());
        const Counts by_loader = since(before_loader);
        EXPECT_LE(by_loader.dups, 1) << "the loader: " << describe(by_loader);
        EXPECT_EQ(by_loader.node_splits, 0) << "the loader: " << describe(by_loader);
        EXPECT_EQ(samples_of_epoch(loader), h5t::kGeneratedRows);
    }
    const Counts all = since(start);
    EXPECT_LE(all.dups, 2) << describe(all);
    EXPECT_EQ(all.node_splits, 0) << describe(all);
}

TEST(HiddenCollectives, MemoryTierSplitsOnce) {
    // The memory tier's node windows need a node communicator: one split in all, which also
    // gives the node size the stage budget and the prefetch ring are checked against.
    const h5t::TempDir dir;
    const RawField field = ids_field(dir);
    const Counts start = counts();
    std::string tier;
    {
        RawSource source(MPI_COMM_WORLD, {field});
        LoaderOptions o = readme_options();
        o.tier.stage = Stage::memory;
        Loader loader(MPI_COMM_WORLD, source, o);
        tier = loader.stats().tier;
        EXPECT_EQ(samples_of_epoch(loader), kRecords);
    }
    EXPECT_EQ(tier, "memory");
    const Counts all = since(start);
    EXPECT_LE(all.dups, 2) << describe(all);
    EXPECT_EQ(all.node_splits, 1) << describe(all);
    EXPECT_EQ(all.splits, 0) << describe(all);
}

TEST(HiddenCollectives, ConversionMakesNoMpiCall) {
    const Counts start = counts();
    {
        const CommRef world = MPI_COMM_WORLD;  // what a constructor given MPI_COMM_WORLD sees
        EXPECT_EQ(world.communicator(), nullptr);
    }
    const Counts all = since(start);
    EXPECT_EQ(all.dups, 0) << describe(all);
    EXPECT_EQ(all.node_splits, 0) << describe(all);
}

TEST(HiddenCollectives, ACommunicatorIsOneDupAndItsSplitIsInherited) {
    // A trainer's own Communicator: one dup, explicit; the objects built from it one dup each;
    // a node split made on it once is inherited by the loader's duplicate, the memory tier's
    // windows included (no second split).
    const h5t::TempDir dir;
    const RawField field = ids_field(dir);
    const MPI_Errhandler handler = world_errhandler();
    const Counts start = counts();
    {
        const Communicator comm(MPI_COMM_WORLD);
        const Counts by_comm = since(start);
        EXPECT_EQ(by_comm.dups, 1) << describe(by_comm);
        EXPECT_EQ(by_comm.node_splits, 0) << describe(by_comm);
        EXPECT_FALSE(comm.has_node_split());
        EXPECT_THROW((void)comm.node_rank(), ConfigError);
        comm.split_node();
        comm.split_node();  // known: local, no second split
        EXPECT_EQ(since(start).node_splits, 1);
        int node_size = 0;
        {
            // An independent answer: the node split of MPI_COMM_WORLD made here.
            MPI_Comm node = MPI_COMM_NULL;
            PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
            MPI_Comm_size(node, &node_size);
            MPI_Comm_free(&node);
        }
        EXPECT_EQ(comm.node_size(), node_size);
        RawSource source(comm, {field});
        LoaderOptions o = readme_options();
        o.tier.stage = Stage::memory;
        const Counts before_loader = counts();
        Loader loader(comm, source, o);
        const Counts by_loader = since(before_loader);
        EXPECT_EQ(loader.stats().tier, "memory");
        EXPECT_EQ(by_loader.dups, 1) << "the loader: " << describe(by_loader);
        EXPECT_EQ(by_loader.node_splits, 0) << "the loader: " << describe(by_loader);
        EXPECT_TRUE(loader.comm().has_node_split());
        EXPECT_EQ(samples_of_epoch(loader), kRecords);
    }
    const Counts all = since(start);
    EXPECT_EQ(all.dups, 2) << describe(all);  // the Communicator and the loader (RawSource: none)
    EXPECT_EQ(all.node_splits, 1) << describe(all);
    EXPECT_EQ(world_errhandler(), handler) << "the caller's communicator's error handler changed";
}
