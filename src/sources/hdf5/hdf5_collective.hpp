#pragma once
// Collective bulk reads of an HDF5 source (internal: the in-memory staging tier and the tests
// use it; it is not part of the public API).

#include <cstddef>
#include <cstdint>

#include "mpistage/hdf5_source.hpp"

namespace mpistage::detail {

/// Access to an Hdf5Source's internals for collective transfers.
struct Hdf5Access {
    /// The source's own communicator (its collective reads run on it). Not collective.
    static MPI_Comm communicator(const Hdf5Source& source) noexcept;
    /// Collective over the source's communicator: rows `[row_begin, row_begin + row_count)` of
    /// field `field` into `dst` (row_count × sample_bytes bytes, native order) with collective
    /// MPI-IO transfers. Reads are split into pieces of at most `max_read_bytes`; every rank
    /// makes the same number of `H5Dread` calls (the maximum over ranks), passing an empty
    /// selection when it has no piece left, so ranks with fewer (or zero) rows never leave the
    /// others waiting. @returns the number of H5Dread calls this rank made (equal on all ranks).
    /// @throws Hdf5Error / ConfigError identically on every rank.
    static std::uint64_t read_rows_collective(const Hdf5Source& source, std::size_t field,
                                              std::uint64_t row_begin, std::uint64_t row_count,
                                              std::byte* dst);
};

}  // namespace mpistage::detail
