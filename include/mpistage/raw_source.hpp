#pragma once
/// @file
/// Raw fixed-size record source: a header of H bytes, then N records of one shape and dtype.
/// Reads IDX files (the MNIST/Fashion-MNIST format, http://yann.lecun.com/exdb/mnist/) directly.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"

namespace mpistage {

/// One field stored as a raw record file.
struct RawField {
    /// Field name in batches.
    std::string name;
    /// File path.
    std::string path;
    /// Bytes to skip before the first record.
    std::uint64_t header_bytes = 0;
    /// Element type of the records.
    DType dtype = DType::uint8;
    /// Shape of one record (empty = scalar).
    std::vector<std::int64_t> sample_shape;
    /// True when the elements are stored big-endian (IDX); they are returned native.
    bool big_endian = false;
    /// Number of records; 0 = (file size − header) / record bytes, which must divide exactly.
    std::uint64_t num_records = 0;
};

/// Element type of an IDX type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
/// 0x0E float64). Pure. @throws FormatError naming `where` for any other code.
DType idx_dtype(unsigned code, const std::string& where);

/// Parses the header of an uncompressed IDX file (magic 0x0000TTDD, big-endian int32 dims:
/// dims[0] is N, the rest the sample shape; TT 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
/// 0x0D float32, 0x0E float64). Not collective.
/// @throws IoError (unreadable), FormatError (gzip-compressed, bad magic, size mismatch).
RawField parse_idx_header(const std::string& path, const std::string& field_name);

/// Fixed-size records of one or more files aligned on the record index.
/// Construction is collective (every rank checks every file, then all agree); `read` is
/// independent and thread-safe (pread).
class RawSource final : public Source {
public:
    /// Collective over `comm` (borrowed for the call, see `CommRef`: the source keeps no
    /// communicator; given a plain `MPI_Comm` it works on a duplicate of its own, its one
    /// `MPI_Comm_dup`, freed on return).
    /// @throws ConfigError (no fields, record counts differ, zero records), IoError, FormatError;
    ///         thrown identically on every rank.
    RawSource(CommRef comm, std::vector<RawField> fields);
    ~RawSource() override;

    const std::vector<FieldInfo>& fields() const override;
    std::uint64_t num_samples() const override;
    std::uint64_t records_in_cut(int rank, int world_size) const override;
    std::string fingerprint() const override;
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override;
    /// Every file against its size and the hashes of its first and last 64 KiB at open (see
    /// `Source::check_unchanged`). @throws IoError naming the file.
    void check_unchanged() const override;
    /// Fields stored as they are returned: one-byte elements, or not `big_endian`.
    bool file_rows(std::size_t field, detail::FileRows& out) const override;

    /// Not collective (each rank closes its own descriptors; callers that close every rank's
    /// source at once, such as Python's `Source.close()`, make it a collective step): closes
    /// the files. Safe to call twice. Later reads and `check_unchanged()` throw ConfigError
    /// naming the files; `fields()`, `num_samples()` and `fingerprint()` stay valid. Waits for
    /// reads running in other threads.
    void close() noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mpistage
