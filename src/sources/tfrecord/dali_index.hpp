#pragma once
// DALI TFRecord index files (NVIDIA DALI `tools/tfrecord2idx`): one line "<offset> <size>" per
// record, size = payload + 16 framing bytes. Parsing and validation against the data are pure
// (no MPI) so the fuzz target and serial tests run them on bytes in memory; the source reads
// each rank's slice of the index bytes and calls them (internal).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sources/tfrecord/framing.hpp"

namespace mpistage::tfrecord {

/// One parsed index line.
struct DaliEntry {
    std::uint64_t offset = 0;  ///< record start in its data file
    std::uint64_t size = 0;    ///< record bytes including the 16 framing bytes
    std::uint32_t file = 0;    ///< index of the data file
    std::uint64_t line = 0;    ///< line number in its index file (1-based once rebased)
    bool malformed = false;    ///< not "<offset> <size>" (reported with its line number)
};

/// Parses one line "<offset> <size>" (spaces, tabs, CR allowed around the numbers); false when
/// malformed or a number overflows 64 bits. Pure.
bool parse_dali_line(std::string_view line, std::uint64_t& offset, std::uint64_t& size);

/// Parses the lines of `text` that start at a position in [`begin`, `limit`): a line starts at
/// 0 when `text_starts_line`, and after every '\n'. Blank lines are counted, not kept. Entries
/// get `file` and a 0-based `line` counted from the first line starting in the range; returns
/// the number of lines that start in the range. Pure.
std::uint64_t parse_dali_lines(std::string_view text, std::size_t begin, std::size_t limit,
                               bool text_starts_line, std::uint32_t file,
                               std::vector<DaliEntry>& out);

/// What validating entries against the data kept.
struct DaliRecords {
    std::vector<RecordRef> records;
    std::uint64_t skipped = 0;
    std::uint64_t skipped_bytes = 0;
};

/// Checks each entry (line numbers already 1-based) against `files` (the data): well formed,
/// size ≥ 16, inside the file, contiguous with the previous entry of the same file, header at the
/// offset validates with length = size − 16 (< 4 GiB), and, with `options.verify_payloads`, the
/// payload CRC. Under `OnCorrupt::skip` a bad length or payload CRC drops the entry (counted).
/// Not collective. @throws FormatError naming the index file (`index_names[file]`), line and the
/// data file; IoError from the readers.
DaliRecords validate_dali_entries(const std::vector<DaliEntry>& entries,
                                  const std::vector<ScanFile>& files,
                                  const std::vector<std::string>& index_names,
                                  const ScanOptions& options);

/// Checks the gathered descriptors of all ranks (file order, contiguity, each index covering its
/// whole data file; the last two only under `OnCorrupt::error`). Pure.
/// @throws FormatError naming the index file.
void check_dali_tiling(const RecordRef* records, std::uint64_t count,
                       const std::vector<std::uint64_t>& file_sizes,
                       const std::vector<std::string>& index_names,
                       const std::vector<std::string>& data_names, OnCorrupt on_corrupt);

}  // namespace mpistage::tfrecord
