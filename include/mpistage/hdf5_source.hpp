#pragma once
/// @file
/// HDF5 source: samples are rows (dimension 0) of one or more datasets of one file, opened
/// collectively through the MPI-IO driver of parallel HDF5.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"

namespace mpistage {

/// Options of an HDF5 source.
struct Hdf5Options {
    /// Dataset paths that form the fields (e.g. {"images", "labels"}). Empty: every dataset of
    /// the file with a fixed-size numeric or h5py boolean type and rank ≥ 1, provided they all
    /// share dimension 0 (datasets of other types, such as strings or float16, are left out).
    std::vector<std::string> fields;
    /// Largest byte count of one read call (MPI-IO counts are int, HDF5 1.10.8
    /// fails above 2 GiB). Default 1 GiB; tests lower it to exercise splitting.
    std::uint64_t max_read_bytes = std::uint64_t{1} << 30;
    /// Size of HDF5's chunk cache per dataset, in bytes (chunked and compressed layouts).
    std::uint64_t chunk_cache_bytes = std::uint64_t{64} << 20;
};

/// An HDF5 file whose datasets, aligned on dimension 0, form the fields of each sample.
///
/// Supported: contiguous, chunked and compact layouts; gzip/shuffle and any filter that the
/// HDF5 build provides; every 1-, 2-, 4- and 8-byte integer and 4- and 8-byte float type in
/// either byte order (returned native); h5py's boolean (an enum over a signed 1-byte integer
/// with exactly the members FALSE = 0 and TRUE = 1, as h5py writes `numpy.bool_`) as
/// `DType::boolean`, one byte per element: the stored byte, which h5py only ever writes as 0
/// or 1 (other stored bytes are not checked). Other enums are refused. Contiguous datasets whose
/// file type only differs from the native type by byte order are read with `pread` at the offset
/// `H5Dget_offset` reports, outside HDF5's global lock; every other layout goes through `H5Dread`
/// (independent transfer) behind one process-wide mutex, as HDF5 is not thread-safe.
///
/// HDF5's automatic error printing is switched off only while the source calls HDF5 (and
/// restored after); HDF5's messages travel inside the exceptions instead.
///
/// Thread safety: `read` may be called from several threads at once. Ownership: owns the HDF5
/// file and dataset handles; close with `close()` (collective) or let the destructor do it.
class Hdf5Source final : public Source {
public:
    /// Collective over `comm`: every rank checks the file, then opens it with the MPI-IO driver.
    /// `comm` (a `Communicator` or a plain `MPI_Comm`, see `CommRef`) is borrowed for the call;
    /// the source keeps its own duplicate, its one `MPI_Comm_dup`.
    /// @throws IoError (missing/unreadable file), FormatError (not an HDF5 file),
    ///         ConfigError (missing dataset, NULL/scalar dataspace, differing first dimensions,
    ///         unsupported type), Hdf5Error (unavailable filter, naming dataset and filter).
    ///         Thrown identically on every rank.
    Hdf5Source(CommRef comm, const std::string& path, Hdf5Options options = {});
    ~Hdf5Source() override;
    Hdf5Source(const Hdf5Source&) = delete;
    Hdf5Source& operator=(const Hdf5Source&) = delete;

    const std::vector<FieldInfo>& fields() const override;
    std::uint64_t num_samples() const override;
    std::uint64_t records_in_cut(int rank, int world_size) const override;
    std::string fingerprint() const override;
    /// With no fields named: one note listing the datasets left out of the default field list
    /// and why (a type that is not a field, such as a string or float16; no dimension 0; no
    /// rows; HDF5 cannot open it), at most 10 of them by name. Empty when fields were named or none
    /// was left out.
    std::vector<std::string> notes() const override;
    /// See `Source::read`. Rows never written read as the dataset's fill value, or as zeros
    /// with fill time never (where HDF5 leaves them undefined).
    /// @throws ConfigError after `close()` (a read of a closed source) or for an id >=
    /// `num_samples()`.
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override;
    /// True when some field is read through H5Dread (MPI-IO independent reads).
    bool reads_use_mpi() const override;
    /// Collective row reads over the source's own communicator (for the memory tier); null
    /// when some field's storage is not wholly allocated (a dataset not, or partly, written).
    const detail::CollectiveRows* collective_rows() const noexcept override;
    /// Contiguous datasets without filters, stored in native byte order.
    bool file_rows(std::size_t field, detail::FileRows& out) const override;
    /// Compares the file's size and the hashes of its first and last 64 KiB with those at
    /// open (see `Source::check_unchanged`). @throws IoError naming the file.
    void check_unchanged() const override;

    /// Collective: closes datasets and the file. Safe to call twice. Later reads throw
    /// ConfigError; `fields()`, `num_samples()` and `path()` stay valid.
    void close() noexcept;

    /// The file path.
    const std::string& path() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mpistage
