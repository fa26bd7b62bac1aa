// TFRecord descriptors held once per node (tfrecord_source.hpp, "Memory"): with the real node
// (one shared window, each rank's part the records it found) and with emulated nodes of 1 and
// 2 ranks (`descriptor_ranks_per_node`: the several-node fill by chunked broadcasts), every
// descriptor equals the writer's own offsets and lengths; the loader yields the same batches at
// every node size, each sample exactly once with the bytes written for it (byte_range + local
// shuffle, global sharding + global shuffle); and a resume at W − 1 ranks with another node
// size serves exactly the samples not yet consumed. Every rank makes the same collective calls.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../../tfrecord_test_util.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/framing.hpp"

using namespace mpistage;

namespace {

/// What the writer put where: record i of the dataset (ids in file order).
struct Written {
    std::vector<std::string> paths;
    std::vector<tfrecord::RecordRef> refs;
};

/// Payload of record i: its id (4 bytes, little-endian), then `extra(i)` bytes of (i + j).
std::uint32_t payload_bytes(std::uint64_t i, bool tiny) {
    return tiny ? 1 : 4 + static_cast<std::uint32_t>(i % 29);
}

/// Rank 0 writes `n` records split over two files; every rank gets the expected descriptors
/// (offsets summed from the lengths written, not read back through mpistage).
Written write_records(const Communicator& comm, std::uint64_t n, bool tiny) {
    const std::string dir = tfrecord_test::shared_tmp_dir(comm);
    Written w;
    w.paths = {dir + "/part-0.tfrecord", dir + "/part-1.tfrecord"};
    std::vector<std::uint8_t> bytes[2];
    std::uint64_t offset[2] = {0, 0};
    for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint32_t file = i < n / 2 ? 0 : 1;
        const std::uint32_t len = payload_bytes(i, tiny);
        w.refs.push_back({offset[file], len, file});
        offset[file] += len + tfrecord::kFramingBytes;
        if (comm.rank() != 0) continue;
        std::vector<std::uint8_t> p(len);
        for (std::uint32_t j = 0; j < len; ++j) p[j] = static_cast<std::uint8_t>(i + j);
        if (!tiny) {
            const auto id = static_cast<std::uint32_t>(i);
            std::memcpy(p.data(), &id, 4);
        }
        tfrecord::append_record(bytes[file], p.data(), p.size());
    }
    if (comm.rank() == 0) {
        for (int f = 0; f < 2; ++f) tfrecord_test::spit(w.paths[f], bytes[f]);
    }
    comm.barrier();
    return w;
}

/// Collective: rank 0 removes the written files and their directory.
void remove_records(const Communicator& comm, const Written& w) {
    comm.barrier();
    if (comm.rank() != 0) return;
    for (const auto& p : w.paths) std::remove(p.c_str());
    const std::string dir = w.paths[0].substr(0, w.paths[0].rfind('/'));
    ::rmdir(dir.c_str());
}

TfRecordOptions with_nodes(int ranks_per_node) {
    TfRecordOptions o;
    o.descriptor_ranks_per_node = ranks_per_node;
    return o;
}

/// Descriptors of `src` that differ from the writer's.
std::uint64_t wrong_descriptors(const TfRecordSource& src, const Written& w) {
    std::uint64_t wrong = 0;
    for (std::uint64_t id = 0; id < w.refs.size(); ++id) {
        const auto r = src.record(id);
        const auto& e = w.refs[id];
        wrong += r.offset != e.offset || r.length != e.length || r.file != e.file ? 1 : 0;
    }
    return wrong;
}

LoaderOptions options(Sharding sharding) {
    LoaderOptions o;
    o.plan.batch_size = 7;
    o.plan.sharding = sharding;
    o.plan.shuffle = sharding == Sharding::global ? Shuffle::global : Shuffle::local;
    o.plan.remainder = Remainder::mask;
    o.plan.seed = 5;
    o.pipeline.prefetch = 2;
    o.pipeline.io_threads = 2;
    o.delivery.pin_memory = false;
    return o;
}

/// One epoch (or its first `limit` steps): a digest of every batch (ids, valid flags, bytes),
/// the valid ids, and the slots whose bytes are not the ones written for their id.
struct Served {
    std::uint64_t digest = 0;
    std::vector<std::int64_t> ids;
    std::uint64_t wrong_bytes = 0;
};

void take(const HostBatch& b, Served& s) {
    std::string text = std::to_string(b.step()) + ":";
    text.append(reinterpret_cast<const char*>(b.index()), b.size() * sizeof(std::int64_t));
    text.append(reinterpret_cast<const char*>(b.valid()), b.size());
    const HostField& f = b.fields()[0];
    text.append(reinterpret_cast<const char*>(f.data), f.size_bytes);
    s.digest = fnv1a64(text + std::to_string(s.digest));
    for (std::size_t j = 0; j < b.size(); ++j) {
        if (!b.valid()[j]) continue;
        const auto id = static_cast<std::uint64_t>(b.index()[j]);
        s.ids.push_back(b.index()[j]);
        const auto at = static_cast<std::uint64_t>(f.offsets[j]);
        const auto len = static_cast<std::uint64_t>(f.offsets[j + 1]) - at;
        std::uint32_t got = 0;
        if (len >= 4) std::memcpy(&got, f.data + at, 4);
        bool ok = len == payload_bytes(id, false) && got == static_cast<std::uint32_t>(id);
        for (std::uint64_t k = 4; ok && k < len; ++k) {
            ok = static_cast<std::uint8_t>(f.data[at + k]) == static_cast<std::uint8_t>(id + k);
        }
        s.wrong_bytes += ok ? 0 : 1;
    }
}

Served serve(Loader& loader, std::uint64_t limit = ~0ull) {
    Served s;
    EpochRange range = loader.epoch(0);
    HostBatch b;
    for (std::uint64_t k = 0; k < limit && range.next(b); ++k) take(b, s);
    return s;
}

/// True when the valid ids of all ranks, with `earlier`, are 0..n−1 exactly once.
bool exactly_once(const Communicator& comm, const std::vector<std::int64_t>& mine,
                  std::vector<std::int64_t> earlier, std::uint64_t n) {
    auto all = comm.allgatherv(mine);
    all.insert(all.end(), earlier.begin(), earlier.end());
    std::sort(all.begin(), all.end());
    if (all.size() != n) return false;
    for (std::uint64_t i = 0; i < n; ++i) {
        if (all[i] != static_cast<std::int64_t>(i)) return false;
    }
    return true;
}

}  // namespace

// 600,000 one-byte records: every rank's part spans several broadcast chunks (2^18 records)
// at W ≤ 2, and the emulated nodes' segments cut them at other places than the ranks' finds.
TEST(TfRecordDescriptors, EqualTheWrittenOnesAtEveryNodeSize) {
    Communicator comm(MPI_COMM_WORLD);
    const std::uint64_t n = 600000;
    const Written w = write_records(comm, n, true);
    for (const int rpn : {0, 1, 2}) {
        TfRecordSource src(comm, w.paths, with_nodes(rpn));
        EXPECT_EQ(src.num_samples(), n) << "ranks per node " << rpn;
        EXPECT_EQ(wrong_descriptors(src, w), 0u) << "ranks per node " << rpn;
        std::uint64_t cut_sum = 0;
        for (int r = 0; r < comm.size(); ++r) cut_sum += src.records_in_cut(r, comm.size());
        EXPECT_EQ(cut_sum, n) << "ranks per node " << rpn;
        src.close();
        EXPECT_THROW(src.record(0), ConfigError) << "a closed source holds no descriptors";
    }
    remove_records(comm, w);
    comm.free();
}

TEST(TfRecordDescriptors, SameBatchesExactlyOnceAtEveryNodeSize) {
    Communicator comm(MPI_COMM_WORLD);
    const std::uint64_t n = 3001;
    const Written w = write_records(comm, n, false);
    for (const Sharding sharding : {Sharding::byte_range, Sharding::global}) {
        std::uint64_t reference = 0;
        for (const int rpn : {0, 1, 2}) {
            const std::string what =
                to_string(sharding) + ", ranks per node " + std::to_string(rpn);
            TfRecordSource src(comm, w.paths, with_nodes(rpn));
            EXPECT_EQ(wrong_descriptors(src, w), 0u) << what;
            Loader loader(comm, src, options(sharding));
            const Served s = serve(loader);
            EXPECT_EQ(s.wrong_bytes, 0u) << what << ": bytes not the ones written for the id";
            EXPECT_TRUE(exactly_once(comm, s.ids, {}, n)) << what;
            const std::uint64_t d = fnv1a64(std::to_string(comm.allreduce_sum(s.digest)) + "/" +
                                            std::to_string(comm.allreduce_max(s.digest)));
            if (rpn == 0) reference = d;
            EXPECT_EQ(d, reference) << what << ": other batches than with the real node";
            src.close();
        }
    }
    remove_records(comm, w);
    comm.free();
}

// W ranks (one emulated node each) consume 5 steps under global shuffle and save; W − 1 ranks
// (a sub-communicator, nodes of 2) restore and finish the epoch: exactly the rest.
TEST(TfRecordDescriptors, ResumeAtSmallerWorldSizeServesExactlyTheRest) {
    Communicator world(MPI_COMM_WORLD);
    if (world.size() < 2) GTEST_SKIP() << "needs 2 or more ranks";
    const std::uint64_t n = 3001;
    const Written w = write_records(world, n, false);
    const LoaderOptions o = options(Sharding::global);
    Served before;
    LoaderState saved;
    {
        TfRecordSource src(world, w.paths, with_nodes(1));
        Loader first(world, src, o);
        before = serve(first, 5);
        saved = first.state();
        src.close();
    }
    const auto consumed = world.allgatherv(before.ids);
    EXPECT_EQ(saved.samples_consumed, consumed.size());
    EXPECT_EQ(world.allreduce_sum(before.wrong_bytes), 0u);
    MPI_Comm sub_raw = MPI_COMM_NULL;
    const bool member = world.rank() < world.size() - 1;
    MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, world.rank(), &sub_raw);
    Served rest;
    if (member) {
        Communicator sub(sub_raw);
        TfRecordSource src(sub, w.paths, with_nodes(2));
        Loader resumed = Loader::restore(sub, src, o, saved);
        rest = serve(resumed);
        EXPECT_EQ(rest.wrong_bytes, 0u);
        src.close();
        sub.free();
        MPI_Comm_free(&sub_raw);
    }
    EXPECT_TRUE(exactly_once(world, rest.ids, consumed, n))
        << "every sample exactly once across both world sizes";
    remove_records(world, w);
    world.free();
}
