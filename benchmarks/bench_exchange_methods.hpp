#pragma once
// The four ways bench_exchange.cpp serves one step's samples from the other ranks' windows
// (benchmarks/README.md, "MPI_Get vs MPI_Alltoallv"), and the window, datatype, shard layout and
// batch they share. Header-only, for the benchmark alone.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"

namespace bench_exchange {

using mpistage::check_mpi;
using u64 = std::uint64_t;

/// RAII owner of an MPI window and its passive-target epoch (MPI_Win_lock_all for its
/// lifetime). Construction and destruction are collective over MPI_COMM_WORLD.
class Window {
public:
    Window(u64 bytes, bool create) {
        void* base = nullptr;
        if (create) {
            check_mpi(
                MPI_Alloc_mem(static_cast<MPI_Aint>(std::max<u64>(bytes, 1)), MPI_INFO_NULL, &base),
                "MPI_Alloc_mem");
            alloc_ = base;
            const int rc = MPI_Win_create(base, static_cast<MPI_Aint>(bytes), 1, MPI_INFO_NULL,
                                          MPI_COMM_WORLD, &win_);
            if (rc != MPI_SUCCESS) MPI_Free_mem(base);
            check_mpi(rc, "MPI_Win_create");
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

/// Independent: copies sample id of this rank's own shard into position k.
inline void copy_local(const Shards& s, const Window& w, u64 id, std::size_t k, Batch& out) {
    for (std::size_t f = 0; f < s.sb.size(); ++f) {
        std::memcpy(out.at(s, f, k), w.base() + s.offset(id, f), s.sb[f]);
    }
}

enum class Method { get_sample, get_step, get_indexed, alltoallv };
/// The table's name of a method.
inline const char* name(Method m) {
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

/// Independent (one-sided): one MPI_Get per remote sample field, each flushed at once when
/// `each` (the tier), else one MPI_Win_flush_local_all for the step. Own samples are copied.
inline void fetch_gets(const Shards& s, const Window& w, const u64* ids, u64 n, Batch& out,
                       bool each) {
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
inline std::vector<std::vector<u64>> by_owner(const Shards& s, const u64* ids, u64 n) {
    std::vector<std::vector<u64>> g(static_cast<std::size_t>(s.world));
    for (u64 k = 0; k < n; ++k) g[static_cast<std::size_t>(s.owner(ids[k]))].push_back(k);
    for (auto& v : g) std::sort(v.begin(), v.end(), [&](u64 a, u64 b) { return ids[a] < ids[b]; });
    return g;
}

/// Independent (one-sided): one MPI_Get per owner with an hindexed target datatype (adjacent
/// ids coalesced), one flush for the step, then unpacked from `buf` into the batch.
inline void fetch_indexed(const Shards& s, const Window& w, const u64* ids, u64 n, Batch& out,
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

/// Exclusive prefix sums of `counts`; throws when one reaches INT_MAX.
inline std::vector<int> displs(const std::vector<int>& counts) {
    std::vector<int> d(counts.size(), 0);
    for (std::size_t i = 1; i < counts.size(); ++i) {
        if (static_cast<long long>(d[i - 1]) + counts[i - 1] > INT_MAX) {
            throw std::runtime_error("alltoallv: displacement over INT_MAX");
        }
        d[i] = d[i - 1] + counts[i - 1];
    }
    return d;
}

/// Collective over MPI_COMM_WORLD: counts (MPI_Alltoall), ids and packed samples
/// (MPI_Alltoallv, `sample` = S contiguous bytes), then unpacked into the batch.
inline void fetch_alltoallv(const Shards& s, const Window& w, const u64* ids, u64 n, Batch& out,
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

}  // namespace bench_exchange
