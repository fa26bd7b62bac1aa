#pragma once
// TFRecord framing checks and the index-free scan of one rank's cut (internal, no MPI), so
// serial tests, fuzz targets and the benchmark can drive them over bytes in memory.
//
// Framing (TensorFlow `tensorflow/core/lib/io/record_writer.cc`), all little-endian:
//
//     uint64 length; uint32 masked_crc32c(length); byte data[length]; uint32 masked_crc32c(data)
//
// Corrupt data under OnCorrupt::skip: a record whose payload CRC fails is dropped (16 + length
// bytes). After a header that does not validate (length CRC, or the record does not fit in the
// file) the walk scans forward to the next position whose header validates (length CRC ok and
// the record fits) and continues there, so every record whose framing is intact is kept. The
// bytes in between are one damaged region, counted in `skipped_bytes`; its records are counted
// by following the (unverified) length fields from its start while each lands inside the region
// (at least one record per region), which is exact when only CRC bytes were damaged.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mpistage/tfrecord_source.hpp"

namespace mpistage::tfrecord {

/// Header (length + its CRC) plus payload CRC: a record occupies `length + kFramingBytes` bytes.
constexpr std::uint64_t kFramingBytes = 16;

/// Length field plus its CRC.
constexpr std::uint64_t kHeaderBytes = 12;

/// Appends one framed record (header, payload, payload CRC) to `out`. Pure, not collective.
void append_record(std::vector<std::uint8_t>& out, const void* payload, std::size_t size_bytes);

/// Reads exactly `size_bytes` bytes at `offset_bytes` of one file into `dst`.
/// Callers never ask beyond the file size. @throws IoError.
using ReadAt = std::function<void(std::uint64_t offset_bytes, void* dst, std::uint64_t size_bytes)>;

/// One file of the concatenated byte space.
struct ScanFile {
    /// Path (or a name for in-memory data) used in error messages.
    std::string name;
    /// File size in bytes.
    std::uint64_t size_bytes = 0;
    /// True for a gzip file, which is one indivisible unit owned by the cut holding its first
    /// byte (its records are indexed after decompression).
    bool whole = false;
    /// Reader of this file.
    ReadAt read;
};

/// Scanning knobs.
struct ScanOptions {
    OnCorrupt on_corrupt = OnCorrupt::error;
    /// Read and check payload CRCs while walking.
    bool verify_payloads = false;
    /// Bytes read at once while scanning (≥ 64).
    std::uint64_t window_bytes = std::uint64_t{1} << 20;
    /// Most bytes the found records' descriptors may take (16 B each, counting the growth of
    /// their vector) before the scan stops with a ConfigError naming the file, the offset and
    /// the bytes; 0: no limit. The MPI open sets the rank's share of the node's memory, so a
    /// file of too many records fails with that error instead of the kernel's OOM killer.
    std::uint64_t max_descriptor_bytes = 0;
};

/// Outcome of checking a 12-byte header at `offset` of a file of `file_size` bytes.
enum class HeaderStatus { ok, too_short, bad_length_crc, does_not_fit };
/// Why a header failed, in words.
std::string to_string(HeaderStatus s);

/// Checks the header at `offset`: at least 16 bytes left, masked CRC32C of the length field
/// matches, and `offset + 16 + length <= file_size` (checked without overflow, before anything
/// is allocated). `header` holds `min(12, file_size - offset)` bytes. Pure; sets `length`.
HeaderStatus check_header(const std::uint8_t* header, std::uint64_t offset, std::uint64_t file_size,
                          std::uint64_t& length);

/// What one rank's scan of its cut found.
struct CutScan {
    /// Global position where the scan started (its resync result, or the given start).
    std::uint64_t start = 0;
    /// First record boundary at or after the cut end reached by walking (≤ T).
    std::uint64_t stop = 0;
    /// Records of non-whole files whose first byte lies in the cut, in file order.
    std::vector<RecordRef> records;
    /// Whole (gzip) files whose first byte lies in the cut.
    std::vector<std::uint32_t> whole_files;
    /// Corrupt records dropped under `OnCorrupt::skip` (see the file comment for regions).
    std::uint64_t skipped = 0;
    /// Bytes of the dropped records and damaged regions.
    std::uint64_t skipped_bytes = 0;
    /// The walk started at an unproven (resynced) position and met a header or payload that
    /// does not validate: the start was false (or the data is corrupt); `records` are void and
    /// the agreement re-walks this cut from its predecessor's stop, where errors are real.
    bool broken = false;
};

/// Start of each file in the concatenated space; F+1 entries, the last is T. Pure.
std::vector<std::uint64_t> file_starts(const std::vector<ScanFile>& files);

/// Resynchronises from global position `begin` (a file start is trusted; inside a whole file the
/// next file start is used), then walks to `end`. Not collective.
/// @throws FormatError naming file and offset on corruption (policy error), IoError.
CutScan scan_cut(const std::vector<ScanFile>& files, std::uint64_t begin, std::uint64_t end,
                 const ScanOptions& options);

/// Walks headers from `start`, keeping records that start before `end`. With `trusted`, `start`
/// is a known record boundary and every bad header or payload is corruption (FormatError under
/// `OnCorrupt::error`, counted skip otherwise); without it, the walk stops at the first bad one
/// and marks the scan `broken` until it reaches a file start (trusted from there).
/// Not collective. @throws as `scan_cut`.
CutScan walk_cut(const std::vector<ScanFile>& files, std::uint64_t start, std::uint64_t end,
                 const ScanOptions& options, bool trusted = true);

/// The index-free split over arbitrary cut points `cuts` (W+1 increasing positions, the first 0,
/// the last T): scans every cut, then runs the same agreement as the MPI source
/// (`index::agree_split`). Returns each simulated rank's final scan. Not collective.
std::vector<CutScan> split_at_cuts(const std::vector<ScanFile>& files,
                                   const std::vector<std::uint64_t>& cuts,
                                   const ScanOptions& options, int* rounds = nullptr);

/// `split_at_cuts` at the cuts `r·T/W` the MPI source uses for `world_size` ranks.
std::vector<CutScan> simulate_split(const std::vector<ScanFile>& files, int world_size,
                                    const ScanOptions& options, int* rounds = nullptr);

/// Cut `rank` of `world_size` of a byte space of `total_bytes`: `[r·T/W, (r+1)·T/W)`. Pure.
std::uint64_t cut_begin(std::uint64_t total_bytes, int rank, int world_size);

/// A ScanFile over bytes in memory (tests, decompressed gzip). The bytes must outlive it.
ScanFile memory_file(std::string name, const std::uint8_t* data, std::uint64_t size_bytes);

}  // namespace mpistage::tfrecord
