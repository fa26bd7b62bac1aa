// Cross-node path of the memory tier (issue 9): MPI_Get under a passive-target epoch versus one
// MPI_Alltoallv exchange per step, measured side by side in one run (benchmarks/README.md,
// "MPI_Get vs MPI_Alltoallv").
//
// Every rank is treated as its own node: it owns a contiguous, balanced shard of N samples in
// an MPI window (MPI_Win_allocate, or MPI_Win_create like the tier's cross-node window), so
// every sample it does not own is fetched through MPI. One epoch is a global shuffle (the same
// permutation on every rank, global batch of W x B, B per rank, the last step padded by
// wrapping); each method serves the same steps:
//   get/sample   one MPI_Get per sample field + MPI_Win_flush_local (what the tier does)
//   get/step     the same gets, one MPI_Win_flush_local_all per step
//   get/indexed  one MPI_Get per owner per step with an hindexed target datatype (runs of
//                consecutive ids coalesced into one block), one flush per step
//   alltoallv    MPI_Alltoall of counts, MPI_Alltoallv of ids, then of the sample bytes (counts
//                in units of one sample, a contiguous datatype of S bytes, so no count or
//                displacement reaches INT_MAX unless one step moves 2^31 samples)
// The warm-up epoch of each method checks every delivered byte against the generator and an
// order-sensitive checksum against the other methods (exit 1, message naming the method, rank,
// step and sample on a mismatch); then the median of --reps epochs (the slowest rank's time).
//
// Usage: mpirun -np W --mca osc ^sm bench_exchange [--samples 60000] [--fields 784,1]
//        [--batch 64] [--reps 5] [--window allocate|create]
// (--mca osc ^sm: on one node Open MPI would serve MPI_Win_allocate with osc/sm, plain loads.)
// 150 KB samples: --samples 2000 --fields 150528,8 --batch 16.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_exchange_methods.hpp"
#include "mpistage/comm.hpp"

namespace {

using namespace bench_exchange;

struct Options {
    u64 samples = 60000;
    std::vector<u64> fields{784, 1};
    u64 batch = 64;
    int reps = 5;
    bool create = false;  // MPI_Win_create instead of MPI_Win_allocate
};

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--samples")
            o.samples = std::stoull(v);
        else if (k == "--batch")
            o.batch = std::stoull(v);
        else if (k == "--reps")
            o.reps = std::stoi(v);
        else if (k == "--window")
            o.create = (v == "create");
        else if (k == "--fields") {
            o.fields.clear();
            for (std::size_t p = 0; p <= v.size();) {
                const std::size_t c = std::min(v.find(',', p), v.size());
                o.fields.push_back(std::stoull(v.substr(p, c - p)));
                p = c + 1;
            }
        } else {
            throw std::invalid_argument("unknown option " + k);
        }
    }
    if ((argc - 1) % 2 != 0) throw std::invalid_argument("options take one value each");
    if (o.samples == 0 || o.batch == 0 || o.reps < 1 || o.fields.empty()) {
        throw std::invalid_argument("--samples, --batch, --reps and --fields must be positive");
    }
    return o;
}

u64 mix(u64 x) {  // splitmix64 finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/// The bytes of field f of sample id (the independent reference every method is checked against).
void generate(u64 id, std::size_t f, u64 bytes, std::uint8_t* dst) {
    const u64 seed = mix(id * 64 + f);
    for (u64 j = 0; j < bytes; j += 8) {
        const u64 w = mix(seed + j);
        std::memcpy(dst + j, &w, std::min<u64>(8, bytes - j));
    }
}

Shards make_shards(const Options& o, int rank, int world) {
    Shards s;
    s.rank = rank;
    s.world = world;
    s.sb = o.fields;
    s.sample_bytes = std::accumulate(o.fields.begin(), o.fields.end(), u64{0});
    for (int r = 0; r <= world; ++r) s.begins.push_back(o.samples * r / world);
    for (int r = 0; r < world; ++r) {
        u64 off = 0;
        for (u64 b : s.sb) {
            s.field_base.push_back(off);
            off += (s.begins[r + 1] - s.begins[r]) * b;
        }
    }
    return s;
}

/// The epoch's global order (the same on every rank).
std::vector<u64> epoch_order(u64 n, u64 epoch) {
    std::vector<u64> order(n);
    std::iota(order.begin(), order.end(), u64{0});
    std::mt19937_64 rng(mix(epoch));
    std::shuffle(order.begin(), order.end(), rng);
    return order;
}

u64 fnv(u64 h, const std::uint8_t* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/// Checks every byte of the step against the generator (throws naming the first mismatch) and
/// folds the batch into `sum`.
void verify_step(const Shards& s, Method m, u64 step, const u64* ids, u64 n, Batch& b, u64& sum) {
    std::vector<std::uint8_t> want;
    for (u64 k = 0; k < n; ++k) {
        for (std::size_t f = 0; f < s.sb.size(); ++f) {
            want.resize(s.sb[f]);
            generate(ids[k], f, s.sb[f], want.data());
            if (std::memcmp(want.data(), b.at(s, f, k), s.sb[f]) != 0) {
                throw std::runtime_error(std::string(name(m)) + ": rank " + std::to_string(s.rank) +
                                         " step " + std::to_string(step) + " sample " +
                                         std::to_string(ids[k]) + " field " + std::to_string(f) +
                                         ": wrong bytes");
            }
            sum = fnv(sum, b.at(s, f, k), s.sb[f]);
        }
    }
}

struct EpochResult {
    double seconds = 0;  // slowest rank
    u64 checksum = 0;    // combined over ranks (verify epochs only)
    u64 remote = 0;      // samples fetched from other ranks, all ranks
};

EpochResult run_epoch(const Shards& s, const Options& o, const Window& w, Method m, u64 epoch,
                      bool verify) {
    const auto order = epoch_order(o.samples, epoch);
    const u64 global = o.batch * static_cast<u64>(s.world);
    const u64 steps = (o.samples + global - 1) / global;
    Batch out(s, o.batch);
    std::vector<u64> ids(o.batch);
    std::vector<std::uint8_t> buf;
    Exchange x;
    MPI_Datatype t;
    check_mpi(MPI_Type_contiguous(static_cast<int>(s.sample_bytes), MPI_BYTE, &t),
              "MPI_Type_contiguous");
    const Datatype sample(t);
    u64 sum = 0xcbf29ce484222325ULL, remote = 0;
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    const auto t0 = std::chrono::steady_clock::now();
    for (u64 step = 0; step < steps; ++step) {
        for (u64 k = 0; k < o.batch; ++k) {
            ids[k] = order[(step * global + static_cast<u64>(s.rank) * o.batch + k) % o.samples];
            remote += s.owner(ids[k]) != s.rank;
        }
        switch (m) {
            case Method::get_sample:
                fetch_gets(s, w, ids.data(), o.batch, out, true);
                break;
            case Method::get_step:
                fetch_gets(s, w, ids.data(), o.batch, out, false);
                break;
            case Method::get_indexed:
                fetch_indexed(s, w, ids.data(), o.batch, out, buf);
                break;
            case Method::alltoallv:
                fetch_alltoallv(s, w, ids.data(), o.batch, out, x, sample.get());
                break;
        }
        if (verify) verify_step(s, m, step, ids.data(), o.batch, out, sum);
    }
    double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EpochResult r;
    check_mpi(MPI_Allreduce(&mine, &r.seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
              "MPI_Allreduce(seconds)");
    std::vector<u64> sums(static_cast<std::size_t>(s.world));
    check_mpi(MPI_Allgather(&sum, 1, MPI_UINT64_T, sums.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD),
              "MPI_Allgather(checksum)");
    for (u64 v : sums) r.checksum = mix(r.checksum ^ v);
    check_mpi(MPI_Allreduce(&remote, &r.remote, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD),
              "MPI_Allreduce(remote)");
    return r;
}

int run(const Options& o) {
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const Shards s = make_shards(o, rank, world);
    if (s.sample_bytes > INT_MAX) throw std::invalid_argument("sample over INT_MAX bytes");
    const Window w(s.shard_bytes(rank), o.create);
    for (u64 id = s.begins[rank]; id < s.begins[rank + 1]; ++id) {
        for (std::size_t f = 0; f < s.sb.size(); ++f)
            generate(id, f, s.sb[f], w.base() + s.offset(id, f));
    }
    check_mpi(MPI_Win_sync(w.get()), "MPI_Win_sync");
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    const u64 global = o.batch * static_cast<u64>(world);
    const u64 steps = (o.samples + global - 1) / global;
    if (rank == 0) {
        std::printf(
            "bench_exchange: %d ranks, each its own node (%s), N = %llu samples of %llu B "
            "(%zu fields), batch %llu per rank, %llu steps, median of %d epochs after a "
            "verified warm-up\n\n| method | samples/s | MB/s | epoch s | remote samples "
            "per step per rank |\n|---|---:|---:|---:|---:|\n",
            world, o.create ? "MPI_Win_create" : "MPI_Win_allocate",
            static_cast<unsigned long long>(o.samples),
            static_cast<unsigned long long>(s.sample_bytes), s.sb.size(),
            static_cast<unsigned long long>(o.batch), static_cast<unsigned long long>(steps),
            o.reps);
    }
    u64 reference = 0;
    for (Method m :
         {Method::get_sample, Method::get_step, Method::get_indexed, Method::alltoallv}) {
        const EpochResult warm = run_epoch(s, o, w, m, 0, true);
        if (m == Method::get_sample) reference = warm.checksum;
        if (warm.checksum != reference) {
            throw std::runtime_error(std::string(name(m)) +
                                     ": checksum differs from the tier's "
                                     "per-sample gets");
        }
        std::vector<double> t;
        for (int i = 1; i <= o.reps; ++i)
            t.push_back(run_epoch(s, o, w, m, static_cast<u64>(i), false).seconds);
        std::sort(t.begin(), t.end());
        const double med = t[t.size() / 2];
        if (rank == 0) {
            std::printf("| %s | %.0f | %.1f | %.4f | %.1f |\n", name(m), o.samples / med,
                        o.samples * s.sample_bytes / med / 1e6, med,
                        static_cast<double>(warm.remote) / static_cast<double>(steps * world));
        }
    }
    if (rank == 0)
        std::printf("\nchecksums identical across methods: %016llx\n",
                    static_cast<unsigned long long>(reference));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int code = 0;
    try {
        code = run(parse(argc, argv));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_exchange: FAILED: %s\n", e.what());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return code;
}
