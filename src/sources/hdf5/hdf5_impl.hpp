#pragma once
// The state behind an Hdf5Source, shared by its files (internal).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/hdf5_source.hpp"
#include "sources/collective_rows.hpp"
#include "sources/hdf5/hdf5_util.hpp"
#include "util/posix_file.hpp"

namespace mpistage {

namespace detail {

/// One field: an open dataset and how its rows are read.
struct Hdf5Field {
    FieldInfo info;
    detail::H5Dataset dataset;
    detail::H5Type mem_type;           // memory type of info.dtype (detail::memory_type)
    std::vector<hsize_t> dims;         // full dataset dims, dims[0] = N
    std::uint64_t row_elements = 1;    // product of dims[1..]
    bool fast_path = false;            // contiguous, raw pread at base_offset
    bool byte_swap = false;            // file order differs from native (fast path only)
    std::uint64_t base_offset = 0;     // H5Dget_offset
    /// Its storage is wholly allocated (`storage_allocated` in hdf5_open.cpp). Otherwise H5Dread
    /// serves the fill value for the rest, or with fill time never leaves the buffer as it was (the
    /// reads zero it first), and the collective reads are not used (HDF5 1.10.8's collective
    /// H5Dread of a partly allocated chunked dataset fails in MPI_File_set_view, MPI_ERR_TYPE).
    bool allocated = false;
    std::string layout;                // for messages and the fingerprint
};

}  // namespace detail

struct Hdf5Source::Impl final : detail::CollectiveRows {
    std::string path;
    Hdf5Options options;
    /// The source's own duplicate of the caller's communicator (for collective reads).
    std::optional<Communicator> comm;
    detail::H5File file;
    std::vector<detail::Hdf5Field> fields;
    std::vector<FieldInfo> infos;
    std::uint64_t num_samples = 0;
    std::uint64_t record_bytes = 0;
    detail::PosixFile raw;  // for the pread fast path
    std::string opened_identity;  // detail::file_identity(raw) at open (check_unchanged)
    bool closed = false;          // after close(): every read throws (check_open)
    /// Datasets the default field list left out, "'name' (why)" (discover()).
    std::vector<std::string> left_out;

    /// @throws ConfigError after `close()`: a read of a closed source.
    void check_open() const {
        if (closed)
            throw ConfigError("hdf5: " + path + ": read of a closed source (after close())");
    }

    std::string where(const detail::Hdf5Field& f) const {
        return "hdf5: " + path + ": dataset '" + f.info.name + "'";
    }

    /// Collective over `ref`: keeps the source's duplicate of it (`comm`), checks, opens
    /// (MPI-IO driver) and discovers the fields.
    void open(const CommRef& ref);
    /// Opens dataset `name` as a field. Local; call under the HDF5 lock.
    void open_field(const std::string& name);
    /// @throws Hdf5Error when a filter the dataset needs is unavailable.
    void check_filters(hid_t dcpl, const std::string& ctx) const;
    /// True when `object` lives in the opened file (an external link resolves to another file).
    bool in_this_file(hid_t object) const;
    /// Every dataset usable as a field, when they share dimension 0. @throws ConfigError.
    std::vector<std::string> discover();
    /// Opens the fields named in the options (or discovered) and checks their alignment.
    void open_fields();

    /// Selects rows `[row, row + count)` (all of dimensions 1..) in `fspace`, the file dataspace
    /// of `f`. Call under the HDF5 lock. @throws Hdf5Error naming the dataset and the rows.
    void select_rows(const detail::Hdf5Field& f, hid_t fspace, std::uint64_t row,
                     std::uint64_t count) const;
    /// Independent H5Dread of `count` rows at `row` into `dst`.
    void read_hdf5_rows(const detail::Hdf5Field& f, std::uint64_t row, std::uint64_t count,
                        std::byte* dst, hid_t dxpl) const;
    /// Reads `count` consecutive rows into contiguous `dst`, in pieces of at most max_read_bytes.
    void read_rows(const detail::Hdf5Field& f, std::uint64_t row, std::uint64_t count,
                   std::byte* dst) const;

    // detail::CollectiveRows (hdf5_collective.cpp): over `comm`, with H5FD_MPIO_COLLECTIVE.
    bool runs_on(const Communicator& other) const noexcept override;
    std::uint64_t read_rows_collective(std::size_t field, std::uint64_t row_begin,
                                       std::uint64_t row_count, std::byte* dst) const override;
};

}  // namespace mpistage
