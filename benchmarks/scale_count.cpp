// The real side of the scale model (benchmarks/scale_model.py, README "Scale model"): counts
// the MPI calls one steady epoch of a `Loader` makes, through the MPI profiling interface (this
// program defines MPI_Iallreduce, ... and forwards to PMPI_*; it is linked with exported symbols,
// so libmpistage's calls resolve here). benchmarks/check_scale_model.py runs it at W = 2, 3, 4
// and compares the counts with the model's formulas.
//
// Usage: mpirun -np W scale_count WORK_DIR B P N MODE...
//   MODE: memory-none | memory-local | memory-global | memory-global-nodes (every rank its own
//         "node": the MPI_Get path) | file-none | file-global (io_threads = 0: inline reads) |
//         file-global-threads (io_threads = 1) | two-phase | budget-global (byte budget of B
//         samples) | tfrecord-global | tfrecord-memory-global (the same records as a
//         TFRecord file of tf.train.Examples: descriptors in the node window) | stream-chunk |
//         stream-hash (a Stream over one stream of N
//         64-byte items, window_steps = P)
//   B batch size, P prefetch (and stream window steps), N samples (64-byte records in an IDX
//   file written to WORK_DIR by rank 0, or one stream of N items).
// Prints from rank 0 one JSON object per mode: the mode, W, B, P, N, the epoch's steps, and per
// call (Iallreduce split by element count) the calls of rank 0 and their bytes, summed over ranks
// for one-sided calls (MPI_Get, MPI_Win_flush_local[_all]), during epoch 1 (epoch 0 is the
// warm-up): from the `epoch(1)` call to the end of its range.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "mpistage/mpistage.hpp"

namespace {

bool g_counting = false;
std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> g_calls;  // name -> calls, bytes

void note(const std::string& name, std::uint64_t bytes) {
    if (!g_counting) return;
    auto& c = g_calls[name];
    c.first += 1;
    c.second += bytes;
}

std::uint64_t type_bytes(MPI_Datatype t, std::uint64_t count) {
    int size = 0;
    PMPI_Type_size(t, &size);
    return count * static_cast<std::uint64_t>(size);
}

int comm_size(MPI_Comm c) {
    int n = 0;
    PMPI_Comm_size(c, &n);
    return n;
}

}  // namespace

// The profiling wrappers: same signatures as Open MPI 4.1's mpi.h.
extern "C" {
int MPI_Iallreduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                   MPI_Request* q) {
    note("MPI_Iallreduce/" + std::to_string(count),
         type_bytes(t, static_cast<std::uint64_t>(count)));
    return PMPI_Iallreduce(s, r, count, t, op, c, q);
}
int MPI_Allreduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    note("MPI_Allreduce", type_bytes(t, static_cast<std::uint64_t>(count)));
    return PMPI_Allreduce(s, r, count, t, op, c);
}
int MPI_Iallgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                   MPI_Comm c, MPI_Request* q) {
    note("MPI_Iallgather", type_bytes(st, static_cast<std::uint64_t>(sc)));
    return PMPI_Iallgather(s, sc, st, r, rc, rt, c, q);
}
int MPI_Iallgatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int d[],
                    MPI_Datatype rt, MPI_Comm c, MPI_Request* q) {
    note("MPI_Iallgatherv", type_bytes(st, static_cast<std::uint64_t>(sc)));
    return PMPI_Iallgatherv(s, sc, st, r, rc, d, rt, c, q);
}
int MPI_Allgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                  MPI_Comm c) {
    note("MPI_Allgather", type_bytes(st, static_cast<std::uint64_t>(sc)));
    return PMPI_Allgather(s, sc, st, r, rc, rt, c);
}
int MPI_Ialltoall(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                  MPI_Comm c, MPI_Request* q) {
    note("MPI_Ialltoall",
         type_bytes(st, static_cast<std::uint64_t>(sc) * static_cast<std::uint64_t>(comm_size(c))));
    return PMPI_Ialltoall(s, sc, st, r, rc, rt, c, q);
}
int MPI_Ialltoallv(const void* s, const int sc[], const int sd[], MPI_Datatype st, void* r,
                   const int rc[], const int rd[], MPI_Datatype rt, MPI_Comm c, MPI_Request* q) {
    std::uint64_t n = 0;
    for (int i = 0; i < comm_size(c); ++i) n += static_cast<std::uint64_t>(sc[i]);
    note("MPI_Ialltoallv", type_bytes(st, n));
    return PMPI_Ialltoallv(s, sc, sd, st, r, rc, rd, rt, c, q);
}
int MPI_Ibcast(void* b, int count, MPI_Datatype t, int root, MPI_Comm c, MPI_Request* q) {
    note("MPI_Ibcast", type_bytes(t, static_cast<std::uint64_t>(count)));
    return PMPI_Ibcast(b, count, t, root, c, q);
}
int MPI_Iexscan(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                MPI_Request* q) {
    note("MPI_Iexscan", type_bytes(t, static_cast<std::uint64_t>(count)));
    return PMPI_Iexscan(s, r, count, t, op, c, q);
}
int MPI_Ibarrier(MPI_Comm c, MPI_Request* q) {
    note("MPI_Ibarrier", 0);
    return PMPI_Ibarrier(c, q);
}
int MPI_Igatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int d[],
                 MPI_Datatype rt, int root, MPI_Comm c, MPI_Request* q) {
    note("MPI_Igatherv", type_bytes(st, static_cast<std::uint64_t>(sc)));
    return PMPI_Igatherv(s, sc, st, r, rc, d, rt, root, c, q);
}
int MPI_Get(void* o, int oc, MPI_Datatype ot, int target, MPI_Aint td, int tc, MPI_Datatype tt,
            MPI_Win w) {
    note("MPI_Get", type_bytes(ot, static_cast<std::uint64_t>(oc)));
    return PMPI_Get(o, oc, ot, target, td, tc, tt, w);
}
int MPI_Win_flush_local(int rank, MPI_Win w) {
    note("MPI_Win_flush_local", 0);
    return PMPI_Win_flush_local(rank, w);
}
int MPI_Win_flush_local_all(MPI_Win w) {
    note("MPI_Win_flush_local", 0);  // one flush, whichever form: counted together
    return PMPI_Win_flush_local_all(w);
}
}

namespace {

/// An IDX file of `n` records of 8 x 8 uint8 (64 bytes), written by rank 0.
std::string write_idx(const std::string& dir, std::uint64_t n, int rank) {
    const std::string path = dir + "/scale-count-idx3-ubyte";
    if (rank == 0) {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        const unsigned char header[] = {0, 0, 8, 3};
        f.write(reinterpret_cast<const char*>(header), 4);
        for (const std::uint32_t d : {static_cast<std::uint32_t>(n), 8u, 8u}) {
            const unsigned char be[] = {
                static_cast<unsigned char>(d >> 24), static_cast<unsigned char>(d >> 16),
                static_cast<unsigned char>(d >> 8), static_cast<unsigned char>(d)};
            f.write(reinterpret_cast<const char*>(be), 4);
        }
        std::vector<char> rec(64);
        for (std::uint64_t i = 0; i < n; ++i) {
            rec[0] = static_cast<char>(i);
            f.write(rec.data(), static_cast<std::streamsize>(rec.size()));
        }
    }
    PMPI_Barrier(MPI_COMM_WORLD);
    return path;
}

/// The same `n` records as a TFRecord file of tf.train.Examples (image: 64 bytes, label),
/// written by rank 0.
std::string write_tfrecord(const std::string& dir, const std::string& idx, std::uint64_t n,
                           int rank) {
    const std::string path = dir + "/scale-count.tfrecord";
    if (rank == 0) {
        mpistage::IdxArray labels;
        labels.dims = {n};
        labels.data.assign(n, 1);
        mpistage::write_idx_tfrecord(mpistage::read_idx_any(idx), labels, path);
    }
    PMPI_Barrier(MPI_COMM_WORLD);
    return path;
}

mpistage::LoaderOptions options_of(const std::string& mode, std::uint64_t b, std::size_t p) {
    mpistage::LoaderOptions o;
    o.pipeline.prefetch = p;
    o.pipeline.io_threads = 0;
    o.delivery.device = "cpu";
    o.plan.batch_size = b;
    o.plan.seed = 11;
    o.plan.remainder = mpistage::Remainder::pad;
    const bool global = mode.find("global") != std::string::npos || mode == "two-phase";
    o.plan.sharding = global ? mpistage::Sharding::global : mpistage::Sharding::byte_range;
    o.plan.shuffle = global                                    ? mpistage::Shuffle::global
                     : mode.find("local") != std::string::npos ? mpistage::Shuffle::local
                                                               : mpistage::Shuffle::none;
    if (mode.rfind("memory", 0) == 0 || mode.rfind("tfrecord-memory", 0) == 0) {
        o.tier.stage = mpistage::Stage::memory;
    }
    if (mode == "memory-global-nodes") o.tier.stage_ranks_per_node = 1;
    if (mode == "file-global-threads") o.pipeline.io_threads = 1;
    if (mode == "two-phase") o.pipeline.two_phase = mpistage::TwoPhase::on;
    if (mode == "budget-global") o.plan.budget.batch_bytes = b * 64;
    return o;
}

/// One pass (epoch 1) of a Stream over one stream of `n` 64-byte items, counted.
std::uint64_t count_stream_pass(const std::string& mode, std::uint64_t b, std::size_t p,
                                std::uint64_t n) {
    mpistage::FieldInfo field{"x", mpistage::DType::uint8, {64}, 64, false};
    auto make = [n](std::size_t) {
        std::uint64_t i = 0;
        return mpistage::CallableStreamSource::Generator([=](mpistage::StreamSample& out) mutable {
            if (i >= n) return false;
            out.fields.assign(1, std::vector<std::byte>(64, static_cast<std::byte>(i)));
            out.key = i++;
            return true;
        });
    };
    mpistage::CallableStreamSource source({field}, 1, make, "scale_count " + std::to_string(n));
    mpistage::LoaderOptions o;
    o.plan.batch_size = b;
    o.stream.window_steps = p;
    o.stream.sharding =
        mode == "stream-hash" ? mpistage::StreamSharding::hash : mpistage::StreamSharding::chunk;
    mpistage::Loader loader(MPI_COMM_WORLD, source, o);
    for (const mpistage::HostBatch& batch : loader.epoch(0)) (void)batch;  // warm-up
    std::uint64_t steps = 0;
    g_counting = true;
    for (const mpistage::HostBatch& batch : loader.epoch(1)) {
        (void)batch;
        ++steps;
    }
    g_counting = false;
    return steps;
}

/// Rank 0 prints the counts of one mode as one JSON line; one-sided calls summed over ranks.
void print_counts(const std::string& mode, int rank, std::uint64_t b, std::size_t p,
                  std::uint64_t n, std::uint64_t steps) {
    std::uint64_t one_sided[3] = {g_calls["MPI_Get"].first, g_calls["MPI_Get"].second,
                                  g_calls["MPI_Win_flush_local"].first};
    std::uint64_t sums[3] = {};
    PMPI_Allreduce(one_sided, sums, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank != 0) return;
    g_calls["MPI_Get"] = {sums[0], sums[1]};
    g_calls["MPI_Win_flush_local"] = {sums[2], 0};
    int w = 0;
    PMPI_Comm_size(MPI_COMM_WORLD, &w);
    std::printf(
        "{\"mode\": \"%s\", \"world\": %d, \"batch\": %llu, \"prefetch\": %zu, "
        "\"samples\": %llu, \"steps\": %llu, \"calls\": {",
        mode.c_str(), w, static_cast<unsigned long long>(b), p, static_cast<unsigned long long>(n),
        static_cast<unsigned long long>(steps));
    const char* sep = "";
    for (const auto& [name, c] : g_calls) {
        if (c.first == 0) continue;
        std::printf("%s\"%s\": [%llu, %llu]", sep, name.c_str(),
                    static_cast<unsigned long long>(c.first),
                    static_cast<unsigned long long>(c.second));
        sep = ", ";
    }
    std::printf("}}\n");
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 6) {
        if (rank == 0) std::fprintf(stderr, "usage: scale_count WORK_DIR B P N MODE...\n");
        MPI_Finalize();
        return 2;
    }
    const std::uint64_t b = std::stoull(argv[2]);
    const std::size_t p = std::stoull(argv[3]);
    const std::uint64_t n = std::stoull(argv[4]);
    const std::string path = write_idx(argv[1], n, rank);
    for (int i = 5; i < argc; ++i) {
        const std::string mode = argv[i];
        g_calls.clear();
        std::uint64_t steps = 0;
        if (mode.rfind("stream", 0) == 0) {
            steps = count_stream_pass(mode, b, p, n);
        } else {
            mpistage::OpenOptions oo;
            oo.format = mpistage::SourceFormat::idx;
            std::string input = path;
            if (mode.rfind("tfrecord", 0) == 0) {
                input = write_tfrecord(argv[1], path, n, rank);
                oo.format = mpistage::SourceFormat::tfrecord;
                mpistage::FeatureSpec image;
                image.name = "image";
                image.shape = {8, 8};
                mpistage::FeatureSpec label;
                label.name = "label";
                label.kind = mpistage::FeatureKind::int64;
                oo.features = {image, label};
            }
            auto source = mpistage::open_source(MPI_COMM_WORLD, {input}, oo);
            mpistage::Loader loader(MPI_COMM_WORLD, *source, options_of(mode, b, p));
            for (const mpistage::HostBatch& batch : loader.epoch(0)) (void)batch;  // warm-up
            g_counting = true;
            {
                auto range = loader.epoch(1);
                for (const mpistage::HostBatch& batch : range) {
                    (void)batch;
                    ++steps;
                }
            }
            g_counting = false;
            loader.close();
        }
        print_counts(mode, rank, b, p, n, steps);
    }
    MPI_Finalize();
    return 0;
}
