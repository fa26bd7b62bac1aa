// Collective bulk reads of an HDF5 source (internal; for staging whole shards).
#include "sources/hdf5/hdf5_collective.hpp"

#include <algorithm>

#include "comm/blocking_watch.hpp"
#include "sources/hdf5/hdf5_impl.hpp"

namespace mpistage::detail {

MPI_Comm Hdf5Access::communicator(const Hdf5Source& source) noexcept {
    return source.impl_->comm ? source.impl_->comm->get() : MPI_COMM_NULL;
}

std::uint64_t Hdf5Access::read_rows_collective(const Hdf5Source& source, std::size_t field,
                                               std::uint64_t row_begin, std::uint64_t row_count,
                                               std::byte* dst) {
    const auto& impl_ = source.impl_;
    const Communicator& comm = *impl_->comm;
    std::uint64_t my_pieces = 0;
    std::uint64_t rows_per_piece = 1;
    LocalStatus status;
    try {
        if (field >= impl_->fields.size()) {
            throw ConfigError("hdf5: field index " + std::to_string(field) + " out of range");
        }
        const Hdf5Field& f = impl_->fields[field];
        if (row_begin + row_count > impl_->num_samples || row_begin + row_count < row_begin) {
            throw ConfigError(impl_->where(f) + ": rows " + std::to_string(row_begin) + "+" +
                              std::to_string(row_count) + " exceed N = " +
                              std::to_string(impl_->num_samples));
        }
        rows_per_piece = std::max<std::uint64_t>(
            impl_->options.max_read_bytes / std::max<std::uint64_t>(f.info.sample_bytes, 1), 1);
        my_pieces = (row_count + rows_per_piece - 1) / rows_per_piece;
    } catch (...) {
        status = LocalStatus::from_current_exception();
    }
    agree_or_throw(comm, status);
    const Hdf5Field& f = impl_->fields[field];
    const std::uint64_t calls = comm.allreduce_max(my_pieces);

    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    const Hdf5ErrorSilencer quiet;
    detail::H5Plist dxpl(h5check(H5Pcreate(H5P_DATASET_XFER), "hdf5: H5Pcreate(dxpl)"));
    h5check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "hdf5: H5Pset_dxpl_mpio");
    for (std::uint64_t i = 0; i < calls; ++i) {
        // After a local failure this rank keeps taking part with empty selections, so the
        // others are never left waiting inside a collective; the error is agreed afterwards.
        const bool have = !status.failed && i < my_pieces;
        try {
            detail::H5Space fspace(h5check(H5Dget_space(f.dataset.get()), "H5Dget_space"));
            hsize_t one = 1;
            detail::H5Space mspace;
            std::byte* out = dst;
            if (have) {
                const std::uint64_t row = row_begin + i * rows_per_piece;
                const std::uint64_t n = std::min(rows_per_piece, row_begin + row_count - row);
                impl_->select_rows(f, fspace.get(), row, n);
                const hsize_t elems = n * f.row_elements;
                mspace = detail::H5Space(h5check(H5Screate_simple(1, &elems, nullptr), "H5Screate"));
                out = dst + (row - row_begin) * f.info.sample_bytes;
            } else {
                h5check(H5Sselect_none(fspace.get()), "H5Sselect_none(file)");
                mspace = detail::H5Space(h5check(H5Screate_simple(1, &one, nullptr), "H5Screate"));
                h5check(H5Sselect_none(mspace.get()), "H5Sselect_none(memory)");
            }
            std::byte dummy{};
            const BlockingWatch watch(comm, "collective H5Dread(" + impl_->where(f) + ")");
            h5check(H5Dread(f.dataset.get(), f.mem_type, mspace.get(), fspace.get(), dxpl.get(),
                            out ? out : &dummy),
                    impl_->where(f) + ": collective H5Dread (call " + std::to_string(i + 1) +
                        " of " + std::to_string(calls) + ")");
        } catch (...) {
            if (!status.failed) status = LocalStatus::from_current_exception();
        }
    }
    agree_or_throw(comm, status);
    return calls;
}

}  // namespace mpistage::detail
