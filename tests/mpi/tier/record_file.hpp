#pragma once
// A file of fixed-size records whose bytes are known from the id (the generator is the
// independent truth), for the tier tests that measure memory: byte j of record `id` is
// (id * multiplier + j) mod 256.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "h5t_mpi.hpp"
#include "mpistage/raw_source.hpp"

namespace tier_test {

/// Collective over MPI_COMM_WORLD: rank 0 writes `n` records of `record_bytes`; all wait.
inline void write_pattern_records(const std::string& path, std::uint64_t n,
                                  std::uint64_t record_bytes, std::uint64_t multiplier) {
    if (h5t::rank() == 0) {
        std::ofstream out(path, std::ios::binary);
        std::vector<char> rec(record_bytes);
        for (std::uint64_t id = 0; id < n; ++id) {
            for (std::uint64_t j = 0; j < record_bytes; ++j) {
                rec[j] = static_cast<char>(id * multiplier + j);
            }
            out.write(rec.data(), static_cast<std::streamsize>(rec.size()));
        }
    }
    h5t::barrier();
}

/// The one field "x" of such a file, `record_bytes` bytes per sample.
inline mpistage::RawField record_field(const std::string& path, std::uint64_t record_bytes) {
    mpistage::RawField f;
    f.name = "x";
    f.path = path;
    f.sample_shape = {static_cast<std::int64_t>(record_bytes)};
    return f;
}

}  // namespace tier_test
