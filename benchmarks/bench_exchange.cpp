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

#include "mpistage/comm.hpp"

namespace {

using mpistage::check_mpi;
using u64 = std::uint64_t;

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

/// RAII owner of an MPI window and its passive-target epoch (MPI_Win_lock_all for its lifetime).
class Window {
public:
    Window(u64 bytes, bool create) {
        void* base = nullptr;
        if (create) {
            check_mpi(
                MPI_Alloc_mem(static_cast<MPI_Aint>(std::max<u64>(bytes, 1)), MPI_INFO_NULL, &base),
                "MPI_Alloc_mem");
            alloc_ = base;
            check_mpi(MPI_Win_create(base, static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL,
                                     MPI_COMM_WORLD, &win_),
                      "MPI_Win_create");
        } else {
            check_mpi(MPI_Win_allocate(static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL,
                                       MPI_COMM_WORLD, &base, &win_),
                      "MPI_Win_allocate");
        }
        MPI_Win_set_errhandler(win_, MPI_ERRORS_RETURN);
        base_ = static_cast<std::uint8_t*>(base);
        check_mpi(MPI_Win_lock_all(MPI_MODE_NOCHECK, win_), "MPI_Win_lock_all");
    }
    Window(const Window&) = delete;
    Window& operator=(const Window&) = delete;
    ~Window() {
        MPI_Win_unlock_all(win_);
        MPI_Win_free(&win_);
        if (alloc_ != nullptr) MPI_Free_mem(alloc_);
    }
    MPI_Win get() const noexcept { return win_; }
    std::uint8_t* base() const noexcept { return base_; }

private:
    MPI_Win win_ = MPI_WIN_NULL;
    void* alloc_ = nullptr;
    std::uint8_t* base_ = nullptr;
};

/// RAII committed datatype.
class Datatype {
public:
    explicit Datatype(MPI_Datatype t) : t_(t) {
        check_mpi(MPI_Type_commit(&t_), "MPI_Type_commit");
    }
    Datatype(const Datatype&) = delete;
    Datatype& operator=(const Datatype&) = delete;
    ~Datatype() { MPI_Type_free(&t_); }
    MPI_Datatype get() const noexcept { return t_; }

private:
    MPI_Datatype t_;
};

/// The sharded data set: who owns which ids, where each field lies in an owner's window.
struct Shards {
    int rank = 0, world = 1;
    std::vector<u64> begins;      // world + 1 shard boundaries
    std::vector<u64> sb;          // bytes per sample of each field
    u64 sample_bytes = 0;         // sum of sb
    std::vector<u64> field_base;  // per owner: byte offset of each field region (owner-major)

    int owner(u64 id) const {
        return static_cast<int>(std::upper_bound(begins.begin(), begins.end(), id) -
                                begins.begin()) -
               1;
    }
    /// Byte offset of field f of sample id inside its owner's window.
    u64 offset(u64 id, std::size_t f) const {
        const int o = owner(id);
        return field_base[static_cast<std::size_t>(o) * sb.size() + f] + (id - begins[o]) * sb[f];
    }
    u64 shard_bytes(int r) const { return (begins[r + 1] - begins[r]) * sample_bytes; }
};

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

/// One step's destination: a batch buffer per field (like the loader's batch sink).
struct Batch {
    std::vector<std::vector<std::uint8_t>> field;
    Batch(const Shards& s, u64 batch) {
        for (u64 b : s.sb) field.emplace_back(batch * b);
    }
    std::uint8_t* at(const Shards& s, std::size_t f, std::size_t k) {
        return field[f].data() + k * s.sb[f];
    }
};

void copy_local(const Shards& s, const Window& w, u64 id, std::size_t k, Batch& out) {
    for (std::size_t f = 0; f < s.sb.size(); ++f) {
        std::memcpy(out.at(s, f, k), w.base() + s.offset(id, f), s.sb[f]);
    }
}

enum class Method { get_sample, get_step, get_indexed, alltoallv };
const char* name(Method m) {
    switch (m) {
        case Method::get_sample:
            return "MPI_Get per sample field + flush (tier)";
        case Method::get_step:
            return "MPI_Get per sample field, one flush per step";
        case Method::get_indexed:
            return "MPI_Get per owner (hindexed type), one flush";
        case Method::alltoallv:
            return "MPI_Alltoall + 2 x MPI_Alltoallv per step";
    }
    return "?";
}

void fetch_gets(const Shards& s, const Window& w, const u64* ids, u64 n, Batch& out, bool each) {
    for (u64 k = 0; k < n; ++k) {
        const int o = s.owner(ids[k]);
        if (o == s.rank) {
            copy_local(s, w, ids[k], k, out);
            continue;
        }
        for (std::size_t f = 0; f < s.sb.size(); ++f) {
            const int len = static_cast<int>(s.sb[f]);
            check_mpi(MPI_Get(out.at(s, f, k), len, MPI_BYTE, o,
                              static_cast<MPI_Aint>(s.offset(ids[k], f)), len, MPI_BYTE, w.get()),
                      "MPI_Get");
            if (each) check_mpi(MPI_Win_flush_local(o, w.get()), "MPI_Win_flush_local");
        }
    }
    if (!each) check_mpi(MPI_Win_flush_local_all(w.get()), "MPI_Win_flush_local_all");
}

/// Positions k of the step's samples grouped by owner, each group sorted by id.
std::vector<std::vector<u64>> by_owner(const Shards& s, const u64* ids, u64 n) {
    std::vector<std::vector<u64>> g(static_cast<std::size_t>(s.world));
    for (u64 k = 0; k < n; ++k) g[static_cast<std::size_t>(s.owner(ids[k]))].push_back(k);
    for (auto& v : g) std::sort(v.begin(), v.end(), [&](u64 a, u64 b) { return ids[a] < ids[b]; });
    return g;
}

void fetch_indexed(const Shards& s, const Window& w, const u64* ids, u64 n, Batch& out,
                   std::vector<std::uint8_t>& buf) {
    const auto groups = by_owner(s, ids, n);
    buf.resize(n * s.sample_bytes);
    u64 at = 0;
    std::vector<u64> starts(groups.size());
    for (int o = 0; o < s.world; ++o) {
        const auto& g = groups[static_cast<std::size_t>(o)];
        starts[static_cast<std::size_t>(o)] = at;
        if (o == s.rank || g.empty()) continue;
        std::vector<int> lens;
        std::vector<MPI_Aint> disp;
        for (std::size_t f = 0; f < s.sb.size(); ++f) {
            for (std::size_t i = 0; i < g.size(); ++i) {
                const u64 off = s.offset(ids[g[i]], f);
                if (i > 0 && ids[g[i]] == ids[g[i - 1]] + 1) {
                    lens.back() += static_cast<int>(s.sb[f]);  // coalesce a run of ids
                } else {
                    lens.push_back(static_cast<int>(s.sb[f]));
                    disp.push_back(static_cast<MPI_Aint>(off));
                }
            }
        }
        const u64 bytes = g.size() * s.sample_bytes;
        if (bytes > INT_MAX) throw std::runtime_error("get/indexed: step over INT_MAX bytes");
        MPI_Datatype t;
        check_mpi(MPI_Type_create_hindexed(static_cast<int>(lens.size()), lens.data(), disp.data(),
                                           MPI_BYTE, &t),
                  "MPI_Type_create_hindexed");
        const Datatype target(t);
        check_mpi(MPI_Get(buf.data() + at, static_cast<int>(bytes), MPI_BYTE, o, 0, 1, target.get(),
                          w.get()),
                  "MPI_Get(hindexed)");
        at += bytes;
    }
    check_mpi(MPI_Win_flush_local_all(w.get()), "MPI_Win_flush_local_all");
    for (int o = 0; o < s.world; ++o) {  // field-major per owner, ids in sorted order
        const auto& g = groups[static_cast<std::size_t>(o)];
        u64 p = starts[static_cast<std::size_t>(o)];
        for (std::size_t f = 0; f < s.sb.size(); ++f) {
            for (u64 k : g) {
                if (o == s.rank) {
                    std::memcpy(out.at(s, f, k), w.base() + s.offset(ids[k], f), s.sb[f]);
                    continue;
                }
                std::memcpy(out.at(s, f, k), buf.data() + p, s.sb[f]);
                p += s.sb[f];
            }
        }
    }
}

/// Reusable buffers of the all-to-all method.
struct Exchange {
    std::vector<int> scount, rcount, sdisp, rdisp;
    std::vector<u64> want, asked;
    std::vector<std::uint8_t> sbytes, rbytes;
};

std::vector<int> displs(const std::vector<int>& counts) {
    std::vector<int> d(counts.size(), 0);
    for (std::size_t i = 1; i < counts.size(); ++i) {
        if (static_cast<long long>(d[i - 1]) + counts[i - 1] > INT_MAX) {
            throw std::runtime_error("alltoallv: displacement over INT_MAX");
        }
        d[i] = d[i - 1] + counts[i - 1];
    }
    return d;
}

void fetch_alltoallv(const Shards& s, const Window& w, const u64* ids, u64 n, Batch& out,
                     Exchange& x, MPI_Datatype sample) {
    const auto groups = by_owner(s, ids, n);
    x.scount.assign(groups.size(), 0);
    x.want.clear();
    for (int o = 0; o < s.world; ++o) {
        if (o == s.rank) continue;  // own samples: plain copies, as in the tier
        for (u64 k : groups[static_cast<std::size_t>(o)]) x.want.push_back(ids[k]);
        x.scount[static_cast<std::size_t>(o)] = static_cast<int>(groups[o].size());
    }
    x.rcount.assign(groups.size(), 0);
    check_mpi(
        MPI_Alltoall(x.scount.data(), 1, MPI_INT, x.rcount.data(), 1, MPI_INT, MPI_COMM_WORLD),
        "MPI_Alltoall(counts)");
    x.sdisp = displs(x.scount);
    x.rdisp = displs(x.rcount);
    x.asked.resize(static_cast<std::size_t>(x.rdisp.back() + x.rcount.back()));
    check_mpi(
        MPI_Alltoallv(x.want.data(), x.scount.data(), x.sdisp.data(), MPI_UINT64_T, x.asked.data(),
                      x.rcount.data(), x.rdisp.data(), MPI_UINT64_T, MPI_COMM_WORLD),
        "MPI_Alltoallv(ids)");
    x.sbytes.resize(x.asked.size() * s.sample_bytes);  // pack what the peers asked for
    for (std::size_t i = 0; i < x.asked.size(); ++i) {
        std::uint8_t* p = x.sbytes.data() + i * s.sample_bytes;
        for (std::size_t f = 0; f < s.sb.size(); ++f) {
            std::memcpy(p, w.base() + s.offset(x.asked[i], f), s.sb[f]);
            p += s.sb[f];
        }
    }
    x.rbytes.resize(x.want.size() * s.sample_bytes);
    check_mpi(
        MPI_Alltoallv(x.sbytes.data(), x.rcount.data(), x.rdisp.data(), sample, x.rbytes.data(),
                      x.scount.data(), x.sdisp.data(), sample, MPI_COMM_WORLD),
        "MPI_Alltoallv(samples)");
    const std::uint8_t* p = x.rbytes.data();
    for (int o = 0; o < s.world; ++o) {
        for (u64 k : groups[static_cast<std::size_t>(o)]) {
            if (o == s.rank) {
                copy_local(s, w, ids[k], k, out);
                continue;
            }
            for (std::size_t f = 0; f < s.sb.size(); ++f) {
                std::memcpy(out.at(s, f, k), p, s.sb[f]);
                p += s.sb[f];
            }
        }
    }
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
