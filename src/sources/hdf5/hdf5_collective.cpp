// Collective bulk reads of an HDF5 source (internal; for staging whole shards).
#include <algorithm>

#include "comm/agree.hpp"
#include "comm/blocking_watch.hpp"
#include "sources/hdf5/hdf5_impl.hpp"

namespace mpistage {

const detail::CollectiveRows* Hdf5Source::collective_rows() const noexcept {
    // Not for partly allocated datasets (detail::Hdf5Field::allocated).
    for (const auto& f : impl_->fields) {
        if (!f.allocated) return nullptr;
    }
    return impl_.get();
}

bool Hdf5Source::Impl::runs_on(const Communicator& other) const noexcept {
    if (!comm || other.get() == MPI_COMM_NULL) return false;
    int result = MPI_UNEQUAL;
    if (MPI_Comm_compare(comm->get(), other.get(), &result) != MPI_SUCCESS) return false;
    return result == MPI_IDENT || result == MPI_CONGRUENT;
}

std::uint64_t Hdf5Source::Impl::read_rows_collective(std::size_t field, std::uint64_t row_begin,
                                                     std::uint64_t row_count,
                                                     std::byte* dst) const {
    const Communicator& c = *comm;
    std::uint64_t my_pieces = 0;
    std::uint64_t rows_per_piece = 1;
    LocalStatus status;
    try {
        check_open();
        if (field >= fields.size()) {
            throw ConfigError("hdf5: field index " + std::to_string(field) + " out of range");
        }
        const detail::Hdf5Field& f = fields[field];
        if (row_begin + row_count > num_samples || row_begin + row_count < row_begin) {
            throw ConfigError(where(f) + ": rows " + std::to_string(row_begin) + "+" +
                              std::to_string(row_count) +
                              " exceed N = " + std::to_string(num_samples));
        }
        rows_per_piece = std::max<std::uint64_t>(
            options.max_read_bytes / std::max<std::uint64_t>(f.info.sample_bytes, 1), 1);
        my_pieces = (row_count + rows_per_piece - 1) / rows_per_piece;
    } catch (...) {
        status = LocalStatus::from_current_exception();
    }
    agree_or_throw(c, status);
    const detail::Hdf5Field& f = fields[field];
    const std::uint64_t calls = c.allreduce_max(my_pieces);

    std::lock_guard<std::recursive_mutex> lock(detail::hdf5_mutex());
    const detail::Hdf5ErrorSilencer quiet;
    detail::H5Plist dxpl(detail::h5check(H5Pcreate(H5P_DATASET_XFER), "hdf5: H5Pcreate(dxpl)"));
    detail::h5check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "hdf5: H5Pset_dxpl_mpio");
    for (std::uint64_t i = 0; i < calls; ++i) {
        // After a local failure this rank keeps taking part with empty selections, so the
        // others are never left waiting inside a collective; the error is agreed afterwards.
        const bool have = !status.failed && i < my_pieces;
        try {
            detail::H5Space fspace(detail::h5check(H5Dget_space(f.dataset.get()), "H5Dget_space"));
            hsize_t one = 1;
            detail::H5Space mspace;
            std::byte* out = dst;
            if (have) {
                const std::uint64_t row = row_begin + i * rows_per_piece;
                const std::uint64_t n = std::min(rows_per_piece, row_begin + row_count - row);
                select_rows(f, fspace.get(), row, n);
                const hsize_t elems = n * f.row_elements;
                mspace = detail::H5Space(
                    detail::h5check(H5Screate_simple(1, &elems, nullptr), "H5Screate"));
                out = dst + (row - row_begin) * f.info.sample_bytes;
            } else {
                detail::h5check(H5Sselect_none(fspace.get()), "H5Sselect_none(file)");
                mspace = detail::H5Space(
                    detail::h5check(H5Screate_simple(1, &one, nullptr), "H5Screate"));
                detail::h5check(H5Sselect_none(mspace.get()), "H5Sselect_none(memory)");
            }
            std::byte dummy{};
            const detail::BlockingWatch watch(c, "collective H5Dread(" + where(f) + ")");
            detail::h5check(H5Dread(f.dataset.get(), f.mem_type.get(), mspace.get(), fspace.get(),
                                    dxpl.get(), out ? out : &dummy),
                            where(f) + ": collective H5Dread (call " + std::to_string(i + 1) +
                                " of " + std::to_string(calls) + ")");
        } catch (...) {
            if (!status.failed) status = LocalStatus::from_current_exception();
        }
    }
    agree_or_throw(c, status);
    return calls;
}

}  // namespace mpistage
