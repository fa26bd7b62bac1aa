#pragma once
// Part of the shared MPI test helpers (namespace h5t, see tests/mpi/hdf5_test_util.hpp): rank
// and size, reductions and broadcasts over MPI_COMM_WORLD, and a temporary directory made by
// rank 0. Everything here that makes an MPI call is collective over MPI_COMM_WORLD and must be
// called by every rank at the same point.

#include <mpi.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "temp_dirs.hpp"

namespace h5t {

inline int rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

inline int size() {
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}

inline void barrier() {
    MPI_Barrier(MPI_COMM_WORLD);
}

inline std::uint64_t fnv(const std::string& s) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

inline std::uint64_t allreduce_u64(std::uint64_t v, MPI_Op op) {
    std::uint64_t out = 0;
    MPI_Allreduce(&v, &out, 1, MPI_UINT64_T, op, MPI_COMM_WORLD);
    return out;
}
inline std::uint64_t sum(std::uint64_t v) {
    return allreduce_u64(v, MPI_SUM);
}
inline std::uint64_t min(std::uint64_t v) {
    return allreduce_u64(v, MPI_MIN);
}
inline std::uint64_t max(std::uint64_t v) {
    return allreduce_u64(v, MPI_MAX);
}

/// Collective: true on every rank when `v` is the same on every rank.
inline bool same_on_all_ranks(std::uint64_t v) {
    return min(v) == max(v);
}

/// Collective: true on every rank when every rank passes true.
inline bool all_true(bool b) {
    return min(b ? 1 : 0) == 1;
}

/// Collective broadcast of a string from `root`.
inline std::string bcast(std::string s, int root = 0) {
    std::uint64_t n = s.size();
    MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
    s.resize(n);
    if (n > 0) MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, MPI_COMM_WORLD);
    return s;
}

/// Collective: every rank's values, concatenated in rank order, on every rank.
inline std::vector<std::int64_t> allgatherv(const std::vector<std::int64_t>& mine) {
    const int w = size();
    int n = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(w)), displs(static_cast<std::size_t>(w));
    MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < w; ++r) {
        displs[static_cast<std::size_t>(r)] = total;
        total += counts[static_cast<std::size_t>(r)];
    }
    std::vector<std::int64_t> all(static_cast<std::size_t>(total));
    MPI_Allgatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(),
                   MPI_INT64_T, MPI_COMM_WORLD);
    return all;
}

/// A directory created by rank 0 and removed by rank 0 at destruction (collective both ways).
class TempDir {
public:
    TempDir() {
        std::string p;
        if (rank() == 0) {
            char tmpl[] = "/tmp/mpistage_h5t_XXXXXX";
            const char* d = ::mkdtemp(tmpl);
            p = d ? d : "";
        }
        path_ = bcast(p, 0);
    }
    ~TempDir() {
        if (path_.empty() || detached_) return;
        barrier();
        if (rank() == 0) {
            std::error_code ec;
            std::filesystem::remove_all(path_, ec);
        }
        barrier();
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }
    /// For process-lifetime directories: removed at exit, after MPI_Finalize, by rank 0
    /// (mpistage_test::remove_at_exit); the destructor then makes no collective.
    void detach_from_mpi() {
        detached_ = true;
        if (rank() == 0 && !path_.empty()) mpistage_test::remove_at_exit(path_);
    }

private:
    std::string path_;
    bool detached_ = false;
};

}  // namespace h5t
