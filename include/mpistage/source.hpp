#pragma once
/// @file
/// The interface every data source implements: files in, samples (records) out.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/dtype.hpp"

namespace mpistage {

namespace detail {
class CollectiveRows;
struct FileRows;
}

/// One field of a sample (e.g. `images` with shape {28, 28} and dtype uint8).
struct FieldInfo {
    /// Name of the field (HDF5 dataset path, or feature name).
    std::string name;
    /// Element type, in native byte order once read.
    DType dtype = DType::uint8;
    /// Shape of one sample of this field (the batch adds a leading dimension B). Empty = scalar.
    std::vector<std::int64_t> sample_shape;
    /// Bytes of one sample of this field (product of shape times element size); 0 when ragged.
    std::uint64_t sample_bytes = 0;
    /// True when samples have different lengths (values + offsets in the batch).
    bool ragged = false;
};

/// Where a source writes the samples of one batch. Implemented by the pipeline.
/// Not thread-safe: one source call writes one sink.
class BatchSink {
public:
    virtual ~BatchSink() = default;
    /// Destination of sample `slot` of fixed-size field `field`: `FieldInfo::sample_bytes` bytes,
    /// valid until the source call that asked for it returns (sources may complete their
    /// writes only then, e.g. the memory tier's gets from other nodes).
    virtual std::byte* fixed(std::size_t field, std::size_t slot) = 0;
    /// Destination of `size_bytes` bytes for sample `slot` of ragged field `field`.
    /// Slots must be requested in increasing order.
    virtual std::byte* ragged(std::size_t field, std::size_t slot, std::uint64_t size_bytes) = 0;
};

/// One named counter a source reports, identical on every rank (e.g. records skipped as corrupt).
struct SourceStatistic {
    std::string name;         ///< snake_case, e.g. "skipped_records"
    std::uint64_t value = 0;  ///< the count (units in the name: `_bytes`, `_records`, `_rounds`)
};

/// A dataset opened by every rank: N samples, each made of the same fields.
///
/// Opening is collective (constructors of implementations); after that `read` is independent
/// (no MPI collectives) and thread-safe, so the pipeline may call it from I/O threads.
class Source {
public:
    virtual ~Source() = default;

    /// The fields of every sample, in a fixed order.
    virtual const std::vector<FieldInfo>& fields() const = 0;
    /// Total number of samples N, identical on every rank.
    virtual std::uint64_t num_samples() const = 0;
    /// Number of records whose first byte lies in `[rank*T/world_size, (rank+1)*T/world_size)`,
    /// i.e. the byte-range cut snapped to record boundaries (docs/architecture.md, plan:
    /// `byte_range`).
    virtual std::uint64_t records_in_cut(int rank, int world_size) const = 0;
    /// A string that identifies the dataset (paths, sizes, shapes, types); ranks compare hashes.
    virtual std::string fingerprint() const = 0;
    /// Reads samples `ids[0..count)` into `sink` slots `0..count)`. Thread-safe, independent.
    /// @throws IoError, FormatError, Hdf5Error naming file, dataset and offset.
    virtual void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const = 0;
    /// True when `read` makes MPI calls (e.g. independent MPI-IO reads); the loader then only
    /// calls it from background threads if MPI provides MPI_THREAD_MULTIPLE.
    virtual bool reads_use_mpi() const { return false; }
    /// Not collective, no MPI calls: throws when a file of the source is no longer the file
    /// that was opened (truncated, grown or rewritten since), so that data read in bulk by a
    /// path that cannot see short reads (a collective HDF5 read returns zeros past the end of
    /// a truncated file) is never served. The memory tier calls it on every rank after its
    /// staging read and agrees on the outcome. The default does nothing: sources whose reads
    /// all detect short reads themselves (`pread` of an exact byte count) need no override.
    /// @throws IoError naming the file and its sizes at open and now.
    virtual void check_unchanged() const {}
    /// Source-specific counters for reports (empty by default). Not collective, no MPI calls.
    virtual std::vector<SourceStatistic> statistics() const { return {}; }
    /// What the source decided on its own that its user should hear of, one sentence each
    /// (e.g. HDF5 datasets left out of the default field list, and why); empty by default.
    /// The same on every rank. Not collective, no MPI calls, thread-safe.
    virtual std::vector<std::string> notes() const { return {}; }
    /// Bytes of sample `id` as stored (payload of all fields), used by the per-step byte
    /// balance (`PlanOptions::balance_steps`). The default sums the fixed fields' sample_bytes
    /// (ragged fields count 0: sources with ragged fields override it). Not collective, no MPI
    /// calls, thread-safe; the same on every rank.
    virtual std::uint64_t sample_bytes(std::uint64_t id) const {
        (void)id;
        std::uint64_t bytes = 0;
        for (const FieldInfo& f : fields()) bytes += f.sample_bytes;
        return bytes;
    }
    /// Internal capability (the type is not installed): non-null when the source can read
    /// whole row ranges of its fixed fields with collective transfers (HDF5 with MPI-IO); the
    /// memory tier then stages shards with it instead of `read`. Not collective; the pointer is
    /// owned by the source and valid while it lives. Default: none.
    virtual const detail::CollectiveRows* collective_rows() const noexcept { return nullptr; }
    /// Internal capability (the type is not installed): true, with `out` filled, when the
    /// rows of fixed field `field` lie back to back in one file in native byte order (row r
    /// at `out.offset + r * sample_bytes`: a contiguous, unfiltered HDF5 dataset; a raw or
    /// IDX file of one-byte or native-order elements), so the memory tier can map the file's
    /// pages instead of copying them (`StageRead`). Not collective, no MPI calls. Default:
    /// false.
    virtual bool file_rows(std::size_t field, detail::FileRows& out) const {
        (void)field;
        (void)out;
        return false;
    }
};

}  // namespace mpistage

namespace mpistage {

/// For sources whose records all have `record_bytes` bytes: how many records start inside the
/// byte cut `[rank*T/W, (rank+1)*T/W)` with T = num_records * record_bytes. Pure.
std::uint64_t fixed_records_in_cut(std::uint64_t num_records, std::uint64_t record_bytes, int rank,
                                   int world_size);

}  // namespace mpistage
