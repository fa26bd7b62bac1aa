#include "sources/tfrecord/dali_index.hpp"

#include <limits>

#include "mpistage/error.hpp"
#include "sources/tfrecord/crc32c.hpp"
#include "util/byte_order.hpp"

namespace mpistage::tfrecord {

namespace {

bool is_blank_char(char c) {
    return c == ' ' || c == '\t' || c == '\r';
}

bool parse_number(std::string_view s, std::size_t& p, std::uint64_t& v) {
    if (p >= s.size() || s[p] < '0' || s[p] > '9') return false;
    v = 0;
    while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
        const auto d = static_cast<std::uint64_t>(s[p] - '0');
        if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return false;
        v = v * 10 + d;
        ++p;
    }
    return true;
}

/// Validates one well-formed entry's framing; false when it is dropped under skip.
bool entry_matches_data(const DaliEntry& en, const ScanFile& f, const std::string& where,
                        const ScanOptions& options, std::uint64_t& length) {
    std::uint8_t h[kHeaderBytes];
    f.read(en.offset, h, kHeaderBytes);
    const auto hs = check_header(h, en.offset, f.size_bytes, length);
    if (hs == HeaderStatus::bad_length_crc && options.on_corrupt == OnCorrupt::skip) {
        return false;
    }
    if (hs != HeaderStatus::ok || length != en.size - kFramingBytes) {
        throw FormatError(where + "does not match the data: at offset " +
                          std::to_string(en.offset) + " the length field reads " +
                          std::to_string(detail::load_le64(h)) + " (" + to_string(hs) +
                          "), the index says " + std::to_string(en.size - kFramingBytes));
    }
    if (length > std::numeric_limits<std::uint32_t>::max()) {
        throw FormatError(where + "record exceeds the 4 GiB limit");
    }
    if (!options.verify_payloads) return true;
    std::vector<std::uint8_t> buf(static_cast<std::size_t>(length + 4));
    f.read(en.offset + kHeaderBytes, buf.data(), buf.size());
    if (masked_crc32c(buf.data(), length) == detail::load_le32(buf.data() + length)) return true;
    if (options.on_corrupt == OnCorrupt::error) {
        throw FormatError("tfrecord: " + f.name + ": payload CRC32C mismatch in record at offset " +
                          std::to_string(en.offset) + " (length " + std::to_string(length) + ")");
    }
    return false;
}

/// Checks the parts of an entry that need no data: well formed, size, bounds, contiguity.
void check_entry_shape(const DaliEntry& en, const DaliEntry* prev, std::uint64_t file_size,
                       const std::string& where) {
    if (en.malformed) throw FormatError(where + "malformed line (expected \"<offset> <size>\")");
    if (en.size < kFramingBytes) {
        throw FormatError(where + "size " + std::to_string(en.size) +
                          " is smaller than the 16 framing bytes");
    }
    if (en.offset > file_size || en.size > file_size - en.offset) {
        throw FormatError(where + "record at offset " + std::to_string(en.offset) + " of size " +
                          std::to_string(en.size) + " ends past end of file (" +
                          std::to_string(file_size) + " bytes)");
    }
    if (prev != nullptr && prev->file == en.file && en.offset != prev->offset + prev->size) {
        throw FormatError(where + "record at offset " + std::to_string(en.offset) +
                          " does not start where the previous one ends (" +
                          std::to_string(prev->offset + prev->size) + ")");
    }
}

}  // namespace

bool parse_dali_line(std::string_view line, std::uint64_t& offset, std::uint64_t& size) {
    std::size_t p = 0;
    auto skip_ws = [&] {
        while (p < line.size() && is_blank_char(line[p])) ++p;
    };
    skip_ws();
    if (!parse_number(line, p, offset)) return false;
    skip_ws();
    if (!parse_number(line, p, size)) return false;
    skip_ws();
    return p == line.size();
}

std::uint64_t parse_dali_lines(std::string_view text, std::size_t begin, std::size_t limit,
                               bool text_starts_line, std::uint32_t file,
                               std::vector<DaliEntry>& out) {
    std::size_t pos = begin;
    const bool at_start = begin == 0 ? text_starts_line : text[begin - 1] == '\n';
    if (!at_start && pos < text.size()) {
        const auto nl = text.find('\n', pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    std::uint64_t lines = 0;
    while (pos < limit && pos < text.size()) {
        auto nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        const std::string_view line = text.substr(pos, nl - pos);
        bool blank = true;
        for (char c : line) blank = blank && is_blank_char(c);
        if (!blank) {
            DaliEntry en;
            en.file = file;
            en.line = lines;
            en.malformed = !parse_dali_line(line, en.offset, en.size);
            out.push_back(en);
        }
        ++lines;
        pos = nl + 1;
    }
    return lines;
}

DaliRecords validate_dali_entries(const std::vector<DaliEntry>& entries,
                                  const std::vector<ScanFile>& files,
                                  const std::vector<std::string>& index_names,
                                  const ScanOptions& options) {
    DaliRecords out;
    const DaliEntry* prev = nullptr;
    for (const auto& en : entries) {
        const auto& f = files[en.file];
        const std::string where = "tfrecord: index " + index_names[en.file] + " line " +
                                  std::to_string(en.line) + " (data file " + f.name + "): ";
        check_entry_shape(en, prev, f.size_bytes, where);
        prev = &en;
        std::uint64_t length = 0;
        if (entry_matches_data(en, f, where, options, length)) {
            out.records.push_back(
                RecordRef{en.offset, static_cast<std::uint32_t>(length), en.file});
        } else {
            ++out.skipped;
            out.skipped_bytes += en.size;
        }
    }
    return out;
}

void check_dali_tiling(const RecordRef* records, std::uint64_t count,
                       const std::vector<std::uint64_t>& file_sizes,
                       const std::vector<std::string>& index_names,
                       const std::vector<std::string>& data_names, OnCorrupt on_corrupt) {
    std::vector<std::uint64_t> expect(file_sizes.size(), 0);
    std::vector<std::uint64_t> seen(file_sizes.size(), 0);
    for (std::uint64_t k = 0; k < count; ++k) {
        const auto& r = records[k];
        ++seen[r.file];
        if (k > 0 && records[k - 1].file > r.file) {
            throw FormatError("tfrecord: index files are out of order");
        }
        if (r.offset != expect[r.file] && on_corrupt == OnCorrupt::error) {
            throw FormatError("tfrecord: index " + index_names[r.file] + " entry " +
                              std::to_string(seen[r.file]) + ": record at offset " +
                              std::to_string(r.offset) +
                              " does not start where the previous one ends (" +
                              std::to_string(expect[r.file]) + ")");
        }
        expect[r.file] = r.offset + kFramingBytes + r.length;
    }
    if (on_corrupt != OnCorrupt::error) return;
    for (std::size_t f = 0; f < file_sizes.size(); ++f) {
        if (expect[f] != file_sizes[f]) {
            throw FormatError("tfrecord: index " + index_names[f] + " covers " +
                              std::to_string(expect[f]) + " bytes of " + data_names[f] +
                              ", which has " + std::to_string(file_sizes[f]) +
                              " (index of another file?)");
        }
    }
}

}  // namespace mpistage::tfrecord
