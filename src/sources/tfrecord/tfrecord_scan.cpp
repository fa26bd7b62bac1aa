// Pure TFRecord framing and the index-free scan (no MPI): see framing.hpp.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "index/split_agreement.hpp"
#include "mpistage/error.hpp"
#include "sources/tfrecord/crc32c.hpp"
#include "sources/tfrecord/framing.hpp"
#include "util/byte_order.hpp"

namespace mpistage::tfrecord {

namespace {

using detail::load_le32;
using detail::load_le64;
using detail::store_le32;
using detail::store_le64;

/// A sliding read window over one file, so small headers cost one large read, not one each.
class Window {
public:
    Window(const ScanFile& file, std::uint64_t capacity)
        : file_(file), capacity_(std::max<std::uint64_t>(capacity, 64)) {}

    /// Pointer to bytes [pos, pos + n) with n ≤ capacity and pos + n ≤ file size.
    const std::uint8_t* get(std::uint64_t pos, std::uint64_t n) {
        if (pos >= off_ && pos + n <= off_ + len_) return buf_.get() + (pos - off_);
        // Allocated on first use, no larger than the file and not zero-filled: the read
        // overwrites it (a scan opens a window per file and per cut).
        if (!buf_)
            buf_.reset(new std::uint8_t[std::max<std::uint64_t>(
                std::min(capacity_, file_.size_bytes), 1)]);
        len_ = std::min(capacity_, file_.size_bytes - pos);
        file_.read(pos, buf_.get(), len_);
        off_ = pos;
        return buf_.get();
    }
    std::uint64_t capacity() const { return capacity_; }
    const ScanFile& file() const { return file_; }

private:
    const ScanFile& file_;
    std::uint64_t capacity_;
    std::unique_ptr<std::uint8_t[]> buf_;
    std::uint64_t off_ = 0;
    std::uint64_t len_ = 0;
};

HeaderStatus header_at(Window& w, std::uint64_t pos, std::uint64_t& length) {
    const std::uint64_t size = w.file().size_bytes;
    const std::uint64_t n = std::min<std::uint64_t>(kHeaderBytes, size - pos);
    return check_header(w.get(pos, n), pos, size, length);
}

/// True when `pos` looks like a record boundary: its header validates and so does the next
/// one (or the record ends exactly at end of file).
bool is_candidate(Window& w, std::uint64_t pos) {
    const std::uint64_t size = w.file().size_bytes;
    if (size - pos < kFramingBytes) return false;
    const std::uint8_t* h = w.get(pos, kHeaderBytes);
    // Cheap rejection first: most positions hold a length that cannot fit.
    if (load_le64(h) > size - pos - kFramingBytes) return false;
    std::uint64_t length = 0;
    if (check_header(h, pos, size, length) != HeaderStatus::ok) return false;
    const std::uint64_t next = pos + kFramingBytes + length;
    if (next == size) return true;
    std::uint64_t next_length = 0;
    return header_at(w, next, next_length) == HeaderStatus::ok;
}

/// First candidate position in [from, size) of the window's file, or the file size.
std::uint64_t resync_in_file(Window& w, std::uint64_t from) {
    const std::uint64_t size = w.file().size_bytes;
    if (size < kFramingBytes) return size;
    for (std::uint64_t pos = from; pos <= size - kFramingBytes; ++pos) {
        if (is_candidate(w, pos)) return pos;
    }
    return size;
}

/// Resync after a bad header in a trusted walk: the first position in [from, size) whose
/// header validates (length CRC and fit; no look-ahead, so an intact record right after a
/// damaged one is kept), or the file size.
std::uint64_t next_valid_header(Window& w, std::uint64_t from) {
    const std::uint64_t size = w.file().size_bytes;
    if (size < kFramingBytes) return size;
    for (std::uint64_t pos = from; pos <= size - kFramingBytes; ++pos) {
        const std::uint8_t* h = w.get(pos, kHeaderBytes);
        if (load_le64(h) > size - pos - kFramingBytes) continue;  // cheap rejection
        std::uint64_t length = 0;
        if (check_header(h, pos, size, length) == HeaderStatus::ok) return pos;
    }
    return size;
}

/// Records in the damaged region [p, q): follow the unverified length fields while each record
/// ends inside the region; at least one.
std::uint64_t records_in_region(Window& w, std::uint64_t p, std::uint64_t q) {
    std::uint64_t n = 0;
    while (p < q) {
        ++n;
        if (q - p < kFramingBytes) break;
        const std::uint64_t length = load_le64(w.get(p, 8));
        if (length > q - p - kFramingBytes) break;
        p += kFramingBytes + length;
    }
    return n;
}

bool payload_ok(Window& w, std::uint64_t pos, std::uint64_t length) {
    std::uint32_t crc = 0;
    std::uint64_t done = 0;
    const std::uint64_t begin = pos + kHeaderBytes;
    while (done < length) {
        const std::uint64_t n = std::min(w.capacity(), length - done);
        crc = crc32c(w.get(begin + done, n), static_cast<std::size_t>(n), crc);
        done += n;
    }
    return load_le32(w.get(begin + length, 4)) == mask_crc32c(crc);
}

std::size_t file_of(const std::vector<std::uint64_t>& starts, std::uint64_t pos) {
    // The last file whose start is <= pos (skips empty files, whose start equals the next one).
    auto it = std::upper_bound(starts.begin(), starts.end() - 1, pos);
    return static_cast<std::size_t>(it - starts.begin()) - 1;
}

[[noreturn]] void bad_header(const ScanFile& f, std::uint64_t offset, HeaderStatus s,
                             const std::uint8_t* header) {
    std::string detail = to_string(s);
    if (s != HeaderStatus::too_short && header != nullptr) {
        detail += ", length field " + std::to_string(load_le64(header));
    }
    detail += ", file size " + std::to_string(f.size_bytes);
    throw FormatError("tfrecord: " + f.name + ": not a TFRecord / truncated record at offset " +
                      std::to_string(offset) + " (" + detail + ")");
}

}  // namespace

std::string to_string(HeaderStatus s) {
    switch (s) {
        case HeaderStatus::ok:
            return "ok";
        case HeaderStatus::too_short:
            return "fewer than 16 bytes left";
        case HeaderStatus::bad_length_crc:
            return "length CRC32C mismatch";
        case HeaderStatus::does_not_fit:
            return "record extends past end of file";
    }
    return "?";
}

HeaderStatus check_header(const std::uint8_t* header, std::uint64_t offset, std::uint64_t file_size,
                          std::uint64_t& length) {
    length = 0;
    if (offset > file_size || file_size - offset < kFramingBytes) return HeaderStatus::too_short;
    length = load_le64(header);
    if (load_le32(header + 8) != masked_crc32c(header, 8)) return HeaderStatus::bad_length_crc;
    if (length > file_size - offset - kFramingBytes) return HeaderStatus::does_not_fit;
    return HeaderStatus::ok;
}

void append_record(std::vector<std::uint8_t>& out, const void* payload, std::size_t size_bytes) {
    std::uint8_t header[kHeaderBytes];
    store_le64(header, size_bytes);
    store_le32(header + 8, masked_crc32c(header, 8));
    out.insert(out.end(), header, header + kHeaderBytes);
    const auto* p = static_cast<const std::uint8_t*>(payload);
    out.insert(out.end(), p, p + size_bytes);
    std::uint8_t footer[4];
    store_le32(footer, masked_crc32c(payload, size_bytes));
    out.insert(out.end(), footer, footer + 4);
}

std::vector<std::uint64_t> file_starts(const std::vector<ScanFile>& files) {
    std::vector<std::uint64_t> starts(files.size() + 1, 0);
    for (std::size_t i = 0; i < files.size(); ++i) {
        starts[i + 1] = starts[i] + files[i].size_bytes;
    }
    return starts;
}

std::uint64_t cut_begin(std::uint64_t total_bytes, int rank, int world_size) {
    if (world_size < 1) throw ConfigError("tfrecord: world size must be >= 1");
    __extension__ typedef unsigned __int128 U128;
    return static_cast<std::uint64_t>(static_cast<U128>(total_bytes) * static_cast<unsigned>(rank) /
                                      static_cast<unsigned>(world_size));
}

namespace {

/// One walk over the concatenated files (see `walk_cut`).
class Walker {
public:
    Walker(const std::vector<ScanFile>& files, const ScanOptions& options, bool trusted)
        : files_(files), options_(options), starts_(file_starts(files)), trusted_(trusted) {}

    CutScan run(std::uint64_t start, std::uint64_t end) {
        out_.start = start;
        std::uint64_t pos = start;
        while (pos < end && pos < starts_.back()) {
            const std::size_t f = file_of(starts_, pos);
            const std::uint64_t local = pos - starts_[f];
            if (local == 0) trusted_ = true;  // a file start is always a record boundary
            if (files_[f].whole) {
                if (local == 0) out_.whole_files.push_back(static_cast<std::uint32_t>(f));
                pos = starts_[f + 1];
                continue;
            }
            if (f != current_) {
                window_ = std::make_unique<Window>(files_[f], options_.window_bytes);
                current_ = f;
            }
            const std::uint64_t next = step(f, local);
            if (out_.broken) break;
            pos = starts_[f] + next;
        }
        out_.stop = std::max(pos, start);
        return std::move(out_);
    }

private:
    /// Handles the record at `local` of file `f`; returns the next local position.
    std::uint64_t step(std::size_t f, std::uint64_t local) {
        const ScanFile& file = files_[f];
        std::uint64_t length = 0;
        const std::uint64_t avail = std::min<std::uint64_t>(kHeaderBytes, file.size_bytes - local);
        const std::uint8_t* header = window_->get(local, avail);
        const HeaderStatus status = check_header(header, local, file.size_bytes, length);
        if (status != HeaderStatus::ok) return bad_header_at(f, local, status, header);
        std::string problem;
        if (length > std::numeric_limits<std::uint32_t>::max()) {
            problem =
                "record of " + std::to_string(length) + " payload bytes exceeds the 4 GiB limit";
        } else if (options_.verify_payloads && !payload_ok(*window_, local, length)) {
            problem = "payload CRC32C mismatch";
        }
        const std::uint64_t next = local + kFramingBytes + length;
        if (problem.empty()) {
            if (out_.records.size() == out_.records.capacity()) check_growth(file, local);
            out_.records.push_back(RecordRef{local, static_cast<std::uint32_t>(length),
                                             static_cast<std::uint32_t>(f)});
        } else if (!trusted_) {
            out_.broken = true;
        } else if (options_.on_corrupt == OnCorrupt::error) {
            throw FormatError("tfrecord: " + file.name + ": " + problem + " in record at offset " +
                              std::to_string(local) + " (length " + std::to_string(length) + ")");
        } else {
            ++out_.skipped;
            out_.skipped_bytes += next - local;
        }
        return next;
    }

    /// Before the records' vector grows (libstdc++ doubles a full vector, and the old buffer
    /// lives until the copy is done): old and new buffer together stay within
    /// `max_descriptor_bytes`, else a ConfigError (see ScanOptions).
    void check_growth(const ScanFile& file, std::uint64_t local) const {
        const std::uint64_t limit = options_.max_descriptor_bytes;
        if (limit == 0) return;
        const std::uint64_t cap = out_.records.capacity();
        const std::uint64_t need = (cap + std::max<std::uint64_t>(2 * cap, 1)) * sizeof(RecordRef);
        if (need <= limit) return;
        throw ConfigError("tfrecord: " + file.name + ": this rank found " +
                          std::to_string(out_.records.size()) + " records up to offset " +
                          std::to_string(local) +
                          "; their descriptors (16 bytes a record) would need " +
                          std::to_string(need) + " bytes, more than this rank's share of the " +
                          "node's memory (" + std::to_string(limit) +
                          " bytes); split the dataset into several sources or run on more nodes");
    }

    std::uint64_t bad_header_at(std::size_t f, std::uint64_t local, HeaderStatus status,
                                const std::uint8_t* header) {
        if (!trusted_) {
            out_.broken = true;
            return local;
        }
        if (options_.on_corrupt == OnCorrupt::error) {
            bad_header(files_[f], local, status,
                       status == HeaderStatus::too_short ? nullptr : header);
        }
        const std::uint64_t q = next_valid_header(*window_, local + 1);
        out_.skipped += records_in_region(*window_, local, q);
        out_.skipped_bytes += q - local;
        return q;
    }

    const std::vector<ScanFile>& files_;
    const ScanOptions& options_;
    const std::vector<std::uint64_t> starts_;
    bool trusted_;
    CutScan out_;
    std::size_t current_ = static_cast<std::size_t>(-1);
    std::unique_ptr<Window> window_;
};

}  // namespace

CutScan walk_cut(const std::vector<ScanFile>& files, std::uint64_t start, std::uint64_t end,
                 const ScanOptions& options, bool trusted) {
    return Walker(files, options, trusted).run(start, end);
}

CutScan scan_cut(const std::vector<ScanFile>& files, std::uint64_t begin, std::uint64_t end,
                 const ScanOptions& options) {
    const auto starts = file_starts(files);
    const std::uint64_t total = starts.back();
    if (begin >= total) {
        CutScan out;
        out.start = out.stop = total;
        return out;
    }
    const std::size_t f = file_of(starts, begin);
    const std::uint64_t local = begin - starts[f];
    std::uint64_t p = begin;
    if (local != 0) {
        if (files[f].whole) {
            p = starts[f + 1];
        } else {
            Window w(files[f], options.window_bytes);
            p = starts[f] + resync_in_file(w, local);
        }
    }
    return walk_cut(files, p, end, options, p == starts[file_of(starts, p)] || p >= total);
}

std::vector<CutScan> split_at_cuts(const std::vector<ScanFile>& files,
                                   const std::vector<std::uint64_t>& cuts,
                                   const ScanOptions& options, int* rounds) {
    std::vector<CutScan> scans;
    for (std::size_t r = 0; r + 1 < cuts.size(); ++r) {
        scans.push_back(scan_cut(files, cuts[r], cuts[r + 1], options));
    }
    const int n = index::agree_split(
        [&] {
            std::vector<index::CutClaim> claims;
            for (const auto& c : scans) claims.push_back({c.start, c.stop, c.broken});
            return claims;
        },
        [&](int m, std::uint64_t from) {
            const auto mu = static_cast<std::size_t>(m);
            scans[mu] = walk_cut(files, from, cuts[mu + 1], options, true);
        });
    if (rounds != nullptr) *rounds = n;
    return scans;
}

std::vector<CutScan> simulate_split(const std::vector<ScanFile>& files, int world_size,
                                    const ScanOptions& options, int* rounds) {
    const std::uint64_t total = file_starts(files).back();
    std::vector<std::uint64_t> cuts;
    for (int r = 0; r <= world_size; ++r) cuts.push_back(cut_begin(total, r, world_size));
    return split_at_cuts(files, cuts, options, rounds);
}

ScanFile memory_file(std::string name, const std::uint8_t* data, std::uint64_t size_bytes) {
    ScanFile f;
    f.size_bytes = size_bytes;
    f.read = [data, size_bytes, name](std::uint64_t off, void* dst, std::uint64_t n) {
        if (off > size_bytes || n > size_bytes - off) {
            throw IoError("tfrecord: " + name + ": read of " + std::to_string(n) +
                          " bytes at offset " + std::to_string(off) + " past end of data");
        }
        if (n > 0) std::memcpy(dst, data + off, static_cast<std::size_t>(n));
    };
    f.name = std::move(name);
    return f;
}

}  // namespace mpistage::tfrecord
