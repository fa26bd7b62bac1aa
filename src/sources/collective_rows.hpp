#pragma once
// A source's collective row reads (internal): the typed capability behind
// `Source::collective_rows()`, so the memory tier stages a shard with collective transfers
// without knowing the source's type.

#include <cstddef>
#include <cstdint>

#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"

namespace mpistage::detail {

/// Collective bulk reads of contiguous rows of a source's fixed-size fields.
class CollectiveRows {
public:
    virtual ~CollectiveRows() = default;
    /// Not collective: true when the source's collective reads run on the same ranks, in the
    /// same order, as `comm` (`MPI_Comm_compare` is IDENT or CONGRUENT), so they can be entered
    /// at the same point as `comm`'s collectives.
    virtual bool runs_on(const Communicator& comm) const noexcept = 0;
    /// Collective over the source's communicator: rows `[row_begin, row_begin + row_count)` of
    /// field `field` into `dst` (row_count × sample_bytes bytes, native order) with collective
    /// MPI-IO transfers. Reads are split into pieces of at most the source's read limit; every
    /// rank makes the same number of read calls (the maximum over ranks), with an empty
    /// selection when it has no piece left, so ranks with fewer (or zero) rows never leave the
    /// others waiting. @returns the number of read calls this rank made (equal on all ranks).
    /// @throws Hdf5Error / ConfigError identically on every rank.
    virtual std::uint64_t read_rows_collective(std::size_t field, std::uint64_t row_begin,
                                               std::uint64_t row_count, std::byte* dst) const = 0;
};

}  // namespace mpistage::detail
