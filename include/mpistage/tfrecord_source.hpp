#pragma once
/// @file
/// TFRecord source over MPI-IO with index-free parallel splitting.
///
/// Framing (TensorFlow `tensorflow/core/lib/io/record_writer.cc`), all little-endian:
///
///     uint64 length; uint32 masked_crc32c(length); byte data[length]; uint32 masked_crc32c(data)
///
/// DALI index files (NVIDIA DALI `tools/tfrecord2idx`) hold one line `"<offset> <size>"` per
/// record, with `size = length + 16` (the framing bytes included).
///
/// (Framing checks and the scan live in src/sources/tfrecord/framing.hpp.)
///
/// Splitting without an index: the files form one concatenated byte space of T bytes; rank r
/// scans `[r·T/W, (r+1)·T/W)`. It resynchronises from its start to the first position whose
/// header validates (length CRC, the record fits in its file, and the next header validates too
/// or the record ends exactly at end of file), then walks headers, seeking over payloads, and
/// keeps the records whose first byte lies in its range. A resync is a heuristic (a payload may
/// hold a whole TFRecord file), so the ranks then *prove* their starts: rank 0 starts at byte 0,
/// a true boundary, and a walk from a true boundary only visits true boundaries; so rank r+1's
/// start must equal the position where rank r's walk stopped (the first boundary at or after its
/// cut end). Ranks allgather (start, stop); the lowest rank whose start differs re-walks from
/// its predecessor's stop; this repeats until all agree (at most W−1 rounds, normally none).
/// The agreed record set is therefore exactly the sequential scan's, for any W.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"
#include "mpistage/tf_example.hpp"

namespace mpistage {

/// What to do with a record whose length or payload CRC32C does not match.
enum class OnCorrupt : std::uint8_t {
    /// Fail on every rank with a FormatError naming file and offset (default).
    error,
    /// Drop the record and count it (`TfRecordSource::skipped_records`); ranks agree on N.
    /// After a bad header the scan continues at the next position whose header validates, so
    /// every record whose framing is intact is kept.
    skip,
};
std::string to_string(OnCorrupt p);
/// "error" or "skip". @throws ConfigError.
OnCorrupt parse_on_corrupt(const std::string& s);

/// Options of a TFRecord source. Every rank must pass the same values (checked at open).
struct TfRecordOptions {
    /// DALI index files, one per data file in the same order; empty = index-free splitting.
    /// Validated against the data (offset + size within the file, length field = size − 16,
    /// length CRC valid, entries tile the file); a mismatch is a FormatError naming the index
    /// file and line. Not allowed with gzip files.
    std::vector<std::string> index_paths;
    /// Policy for records whose CRC32C does not match.
    OnCorrupt on_corrupt = OnCorrupt::error;
    /// Check the payload CRC32C of every record read (FormatError naming file and offset).
    bool verify_payload_crc = true;
    /// Read and check every payload CRC32C at open. Forced on with `on_corrupt = skip` (when
    /// `verify_payload_crc`), so corrupt records are dropped before planning and N stays equal
    /// on every rank; costs one full read of the data at open.
    bool verify_payloads_at_open = false;
    /// Decoded `tf.train.Example` features, one field each; empty = raw payload bytes as one
    /// ragged uint8 field named `raw_field_name`.
    std::vector<FeatureSpec> features;
    /// Field name of the raw payload when `features` is empty.
    std::string raw_field_name = "record";
    /// Largest byte count of one read call (MPI-IO counts are int). Default 1 GiB; must be ≥ 16.
    std::uint64_t max_read_bytes = std::uint64_t{1} << 30;
    /// Bytes read at once while scanning headers at open. Default 1 MiB; must be ≥ 64.
    std::uint64_t scan_window_bytes = std::uint64_t{1} << 20;
    /// Read records with `pread` (the default) instead of `MPI_File_read_at`. The files are
    /// opened and scanned with MPI-IO either way. `read()` runs on the loader's I/O threads and
    /// the chunk read-ahead's: `pread` lets their reads be in flight at once, as the HDF5
    /// source's independent reads are. Open MPI's ompio must have one handle's independent
    /// reads serialised (two at once crashed in MPI_File_read_at), so with `false` a source
    /// reads one request at a time: on a file system with a per-request latency that caps a
    /// rank at one read per latency (benchmarks/README.md, "TFRecord under the PFS model").
    /// `false` needs MPI_THREAD_MULTIPLE, else `pread` is used (docs/architecture.md,
    /// pipeline).
    bool posix_reads = true;
    /// Largest decompressed size of one gzip file; inflating stops with a FormatError naming
    /// the file and this option once it is exceeded (a gzip bomb never fills memory). Default
    /// 64 GiB; must be ≥ 16. The decompressed bytes of a gzip file are kept in memory.
    std::uint64_t max_decompressed_bytes = std::uint64_t{64} << 30;
    /// Largest ratio of decompressed to compressed bytes of one gzip file (FormatError naming
    /// the file and this option beyond it; 0 = no ratio limit). Default 1000: real TFRecord
    /// gzip files compress far less than 1000:1, zero-filled bombs far more.
    std::uint64_t max_decompression_ratio = 1000;
    /// Testing: groups of this many consecutive ranks act as one node for the descriptor
    /// window (so one machine exercises the several-node exchange); 0 = the real nodes
    /// (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`). Must be ≥ 0.
    int descriptor_ranks_per_node = 0;

    /// @throws ConfigError naming the bad field.
    void validate() const;
};

/// The descriptor of one record, as `TfRecordSource::record` returns it.
namespace tfrecord {

/// One record: 16 bytes, so exchanging every descriptor costs 16 B × N on each rank.
struct RecordRef {
    /// Byte offset of the record's length field in its file (decompressed stream for gzip).
    std::uint64_t offset = 0;
    /// Payload bytes (framing excluded). Records are limited to 4 GiB − 1.
    std::uint32_t length = 0;
    /// Index of the file in the source's path list.
    std::uint32_t file = 0;
};
static_assert(sizeof(RecordRef) == 16, "RecordRef is exchanged as 16 raw bytes");

}  // namespace tfrecord

/// TFRecord files (plain or whole-file gzip) as a Source: one sample per record.
///
/// Fields: raw mode gives one ragged uint8 field (the payload); Example mode gives one field per
/// `FeatureSpec` (see tf_example.hpp).
///
/// Memory: the 16-byte descriptors of all N records are held once per node, in an MPI-3
/// shared-memory window of the node's ranks (every rank can read any id, as the planner may
/// assign ids from another rank's range, e.g. padding or global shuffle). Each rank of a node
/// owns an equal part of that array (on one node: exactly the records it found, so nothing is
/// copied), 16 B × N / (ranks on the node); pages of other ranks' parts count in a rank's
/// resident set only once it reads them. While the descriptors are exchanged a rank also holds
/// the records it found (16 B × N / W; on one node handed back piece by piece as they are
/// copied into the window). Open is refused up front with a ConfigError naming the
/// files and bytes when the window's share exceeds the rank's share of the node's memory (half
/// of it divided among the node's ranks). Plus the decompressed bytes of every gzip file this
/// rank has touched (its own files at open, others decompressed whole on first read and kept
/// until the source is destroyed).
///
/// Gzip files (name ending in `.gz` or starting with bytes 1f 8b) are sharded by whole files:
/// the file whose first compressed byte lies in rank r's cut is decompressed (zlib, multi-member)
/// and indexed by rank r. `records_in_cut` counts such records at their file's start. Inflating
/// streams: each header is checked as soon as its bytes arrive (a bad first header fails after
/// the first piece, naming the file and offset), and `max_decompressed_bytes` /
/// `max_decompression_ratio` stop a gzip bomb before it fills memory.
///
/// Thread safety: `read` may be called from several threads at once. Ownership: owns the MPI
/// file handles and POSIX descriptors; close with `close()` (collective) or the destructor.
class TfRecordSource final : public Source {
public:
    /// Collective over `comm`: opens every file with `MPI_File_open`, scans this rank's cut (or
    /// reads its slice of the index files), agrees on boundaries, counts and skipped records,
    /// and gathers all descriptors into one node-shared window per node. Every failure is
    /// agreed: every rank throws the same. `comm` is borrowed for the call (see `CommRef`):
    /// the source keeps no communicator; given a plain `MPI_Comm` it works on a duplicate of its
    /// own, its one `MPI_Comm_dup`, freed on return. The index-free scan and the node window
    /// make the node split (`Communicator::split_node`; once, cached on the `Communicator`
    /// given, so a loader duplicated from it afterwards inherits it).
    /// @throws ConfigError (bad or differing options, no paths, index count mismatch,
    ///         descriptors over the memory share), IoError (missing/unreadable file, short
    ///         read), FormatError (not a TFRecord, truncated record, CRC mismatch, bad index
    ///         line, empty file, no records) naming the file and the 64-bit byte offset (or
    ///         index line).
    TfRecordSource(CommRef comm, std::vector<std::string> paths, TfRecordOptions options = {});
    ~TfRecordSource() override;
    TfRecordSource(const TfRecordSource&) = delete;
    TfRecordSource& operator=(const TfRecordSource&) = delete;

    const std::vector<FieldInfo>& fields() const override;
    std::uint64_t num_samples() const override;
    std::uint64_t records_in_cut(int rank, int world_size) const override;
    std::string fingerprint() const override;
    /// Independent, thread-safe. @throws FormatError (CRC mismatch, bad Example) or IoError
    /// naming file and offset; ConfigError for an id ≥ N.
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override;

    /// The record's payload bytes (framing excluded). @throws ConfigError for an id ≥ N.
    std::uint64_t sample_bytes(std::uint64_t id) const override;
    /// Records dropped under `OnCorrupt::skip` (identical on every rank).
    std::uint64_t skipped_records() const noexcept;
    /// Bytes of the dropped records and damaged regions (identical on every rank).
    std::uint64_t skipped_bytes() const noexcept;
    /// "skipped_records", "skipped_bytes", "resync_rounds". Not collective.
    std::vector<SourceStatistic> statistics() const override;
    /// The descriptor of record `id` (< N). @throws ConfigError.
    tfrecord::RecordRef record(std::uint64_t id) const;
    /// The paths, in the order given.
    const std::vector<std::string>& paths() const noexcept;
    /// True when file `file` (index into `paths()`) is a whole-file gzip TFRecord.
    bool file_is_gzip(std::size_t file) const;
    /// Agreement rounds the index-free split needed (0 when every resync was right).
    int resync_rounds() const noexcept;
    /// Collective: closes the MPI files and descriptors and frees the descriptor window; the
    /// source then only answers `num_samples`, `fields`, `fingerprint` and `statistics`
    /// (`record`, `read`, `sample_bytes` and `records_in_cut` throw ConfigError). Safe to call
    /// twice.
    void close() noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Collective over `comm`: writes a DALI-compatible index (`"<offset> <size>\n"`, size =
/// payload + 16) for each of `data_paths` to the matching `index_paths`. Records are found by the
/// parallel index-free scan (every rank scans its cut); rank 0 writes the files.
/// @throws as `TfRecordSource` (gzip files: ConfigError), IoError when a file cannot be written;
///         identically on every rank.
void write_dali_index(CommRef comm, const std::vector<std::string>& data_paths,
                      const std::vector<std::string>& index_paths);

}  // namespace mpistage
