// TfRecordSource: collective open over MPI-IO, index-free split agreement, DALI index files,
// whole-file gzip, and independent thread-safe reads. See tfrecord_source.hpp.
#include "util/byte_order.hpp"
#include "mpistage/tfrecord_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <utility>

#include "mpistage/crc32c.hpp"
#include "mpistage/plan.hpp"

namespace mpistage {

using tfrecord::kFramingBytes;
using tfrecord::kHeaderBytes;
using tfrecord::RecordRef;

std::string to_string(OnCorrupt p) {
    return p == OnCorrupt::skip ? "skip" : "error";
}

OnCorrupt parse_on_corrupt(const std::string& s) {
    if (s == "error") return OnCorrupt::error;
    if (s == "skip") return OnCorrupt::skip;
    throw ConfigError("on_corrupt: unknown policy '" + s + "' (error or skip)");
}

void TfRecordOptions::validate() const {
    if (max_read_bytes < kFramingBytes) {
        throw ConfigError("tfrecord options: max_read_bytes must be >= 16");
    }
    if (max_read_bytes > (std::uint64_t{1} << 30)) {
        throw ConfigError("tfrecord options: max_read_bytes must be <= 1 GiB (DESIGN.md §3)");
    }
    if (scan_window_bytes < 64) throw ConfigError("tfrecord options: scan_window_bytes < 64");
    if (features.empty() && raw_field_name.empty()) {
        throw ConfigError("tfrecord options: raw_field_name is empty");
    }
    for (const auto& f : features) f.validate();
}

namespace {

std::string errno_text(int err) {
    return std::string(std::strerror(err));
}

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

using detail::load_le32;
using detail::load_le64;

/// Reads exactly `n` bytes at `off` with pread, in pieces of at most `max_piece`.
void pread_exact(int fd, const std::string& path, std::uint64_t off, void* dst, std::uint64_t n,
                 std::uint64_t max_piece) {
    auto* p = static_cast<std::uint8_t*>(dst);
    std::uint64_t done = 0;
    while (done < n) {
        const std::uint64_t want = std::min(n - done, max_piece);
        const ssize_t got =
            ::pread(fd, p + done, static_cast<std::size_t>(want), static_cast<off_t>(off + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            throw IoError("tfrecord: pread of " + path + " at offset " +
                          std::to_string(off + done) + " failed: " + errno_text(errno));
        }
        if (got == 0) {
            throw IoError("tfrecord: " + path + ": unexpected end of file at offset " +
                          std::to_string(off + done) + " (file shrank while open?)");
        }
        done += static_cast<std::uint64_t>(got);
    }
}

/// Reads exactly `n` bytes at `off` with MPI_File_read_at (independent), in pieces.
void mpi_read_exact(MPI_File fh, const std::string& path, std::uint64_t off, void* dst,
                    std::uint64_t n, std::uint64_t max_piece) {
    auto* p = static_cast<std::uint8_t*>(dst);
    std::uint64_t done = 0;
    while (done < n) {
        const std::uint64_t want = std::min(n - done, max_piece);
        MPI_Status st;
        const int rc = MPI_File_read_at(fh, static_cast<MPI_Offset>(off + done), p + done,
                                        static_cast<int>(want), MPI_BYTE, &st);
        if (rc != MPI_SUCCESS) {
            char text[MPI_MAX_ERROR_STRING] = {0};
            int len = 0;
            MPI_Error_string(rc, text, &len);
            throw IoError("tfrecord: MPI_File_read_at of " + path + " at offset " +
                          std::to_string(off + done) + " failed: " + text);
        }
        int got = 0;
        check_mpi(MPI_Get_count(&st, MPI_BYTE, &got), "MPI_Get_count");
        if (got <= 0) {
            throw IoError("tfrecord: " + path + ": unexpected end of file at offset " +
                          std::to_string(off + done));
        }
        done += static_cast<std::uint64_t>(got);
    }
}

/// Whole-stream zlib inflate of gzip data (multi-member, as `cat a.gz b.gz` and Beam write).
std::vector<std::uint8_t> gunzip(const std::string& path, const std::vector<std::uint8_t>& in) {
    std::vector<std::uint8_t> out;
    z_stream zs;
    std::memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, 15 + 32) != Z_OK) {
        throw IoError("tfrecord: " + path + ": inflateInit2 failed");
    }
    std::size_t in_pos = 0;
    out.resize(std::max<std::size_t>(in.size() * 4, 1 << 16));
    std::size_t out_pos = 0;
    int rc = Z_OK;
    for (;;) {
        const std::size_t in_left = in.size() - in_pos;
        zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
        zs.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, 1u << 30));
        if (out.size() - out_pos < (1u << 16)) out.resize(out.size() * 2);
        zs.next_out = out.data() + out_pos;
        zs.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - out_pos, 1u << 30));
        const uInt avail_in_before = zs.avail_in;
        const uInt avail_out_before = zs.avail_out;
        rc = inflate(&zs, Z_NO_FLUSH);
        in_pos += avail_in_before - zs.avail_in;
        out_pos += avail_out_before - zs.avail_out;
        if (rc == Z_STREAM_END) {
            // Another gzip member may follow (skip trailing zero padding).
            while (in_pos < in.size() && in[in_pos] == 0) ++in_pos;
            if (in_pos >= in.size()) break;
            if (inflateReset(&zs) != Z_OK) break;
            continue;
        }
        if (rc == Z_BUF_ERROR && zs.avail_out == 0) continue;
        if (rc != Z_OK) {
            const std::string msg = zs.msg != nullptr ? zs.msg : "error " + std::to_string(rc);
            inflateEnd(&zs);
            throw FormatError("tfrecord: " + path + ": gzip data corrupt near compressed offset " +
                              std::to_string(in_pos) + " (" + msg + ")");
        }
        if (in_pos >= in.size() && avail_in_before == 0) {
            inflateEnd(&zs);
            throw FormatError("tfrecord: " + path +
                              ": truncated gzip stream at compressed "
                              "offset " +
                              std::to_string(in_pos));
        }
    }
    inflateEnd(&zs);
    out.resize(out_pos);
    out.shrink_to_fit();
    return out;
}

struct FileState {
    std::string path;
    std::uint64_t size = 0;
    bool gz = false;
    MPI_File fh = MPI_FILE_NULL;
    int fd = -1;
};

/// Sink that discards data (used only for counting); unused by reads.
}  // namespace

struct TfRecordSource::Impl {
    TfRecordOptions options;
    std::vector<std::string> paths;
    std::vector<FileState> files;
    std::vector<std::uint64_t> starts;  // F+1, compressed for gzip
    std::vector<RecordRef> records;
    std::vector<FieldInfo> fields;
    std::unique_ptr<ExampleDecoder> decoder;
    std::uint64_t skipped = 0;
    int rounds = 0;
    bool mpi_reads = false;
    std::string fingerprint;
    mutable std::mutex gz_mutex;
    mutable std::vector<std::shared_ptr<const std::vector<std::uint8_t>>> gz_data;
    bool closed = false;

    void read_at(std::size_t f, std::uint64_t off, void* dst, std::uint64_t n,
                 bool main_thread) const {
        const auto& fs = files[f];
        if (fs.fh != MPI_FILE_NULL && (mpi_reads || main_thread)) {
            mpi_read_exact(fs.fh, fs.path, off, dst, n, options.max_read_bytes);
        } else {
            pread_exact(fs.fd, fs.path, off, dst, n, options.max_read_bytes);
        }
    }

    std::vector<std::uint8_t> read_file(std::size_t f, bool main_thread) const {
        std::vector<std::uint8_t> buf(static_cast<std::size_t>(files[f].size));
        read_at(f, 0, buf.data(), buf.size(), main_thread);
        return buf;
    }

    std::shared_ptr<const std::vector<std::uint8_t>> gz(std::size_t f, bool main_thread) const {
        {
            std::lock_guard<std::mutex> lock(gz_mutex);
            if (gz_data[f]) return gz_data[f];
        }
        auto data = std::make_shared<const std::vector<std::uint8_t>>(
            gunzip(files[f].path, read_file(f, main_thread)));
        std::lock_guard<std::mutex> lock(gz_mutex);
        if (!gz_data[f]) gz_data[f] = data;
        return gz_data[f];
    }

    std::uint64_t cut_position(const RecordRef& r) const {
        return files[r.file].gz ? starts[r.file] : starts[r.file] + r.offset;
    }
};

namespace {

void close_files(std::vector<FileState>& files) noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    for (auto& f : files) {
        if (f.fh != MPI_FILE_NULL && !finalized) MPI_File_close(&f.fh);
        f.fh = MPI_FILE_NULL;
        if (f.fd >= 0) ::close(f.fd);
        f.fd = -1;
    }
}

std::string options_signature(const std::vector<std::string>& paths, const TfRecordOptions& o) {
    std::ostringstream s;
    for (const auto& p : paths) s << p << '\n';
    for (const auto& p : o.index_paths) s << "idx:" << p << '\n';
    s << to_string(o.on_corrupt) << ';' << o.verify_payload_crc << ';' << o.verify_payloads_at_open
      << ';' << o.raw_field_name << ';' << o.max_read_bytes << ';' << o.scan_window_bytes << ';'
      << o.posix_reads;
    for (const auto& f : o.features) {
        s << ";f:" << f.name << ':' << to_string(f.kind) << ':' << dtype_name(f.dtype) << ':'
          << f.ragged;
        for (auto d : f.shape) s << 'x' << d;
    }
    return s.str();
}

/// Parses one index line "<offset> <size>"; false when malformed.
bool parse_index_line(const char* b, const char* e, std::uint64_t& offset, std::uint64_t& size) {
    auto skip_ws = [&](const char*& p) {
        while (p < e && (*p == ' ' || *p == '\t' || *p == '\r')) ++p;
    };
    auto number = [&](const char*& p, std::uint64_t& v) {
        if (p >= e || *p < '0' || *p > '9') return false;
        v = 0;
        while (p < e && *p >= '0' && *p <= '9') {
            const std::uint64_t d = static_cast<std::uint64_t>(*p - '0');
            if (v > (UINT64_MAX - d) / 10) return false;
            v = v * 10 + d;
            ++p;
        }
        return true;
    };
    const char* p = b;
    skip_ws(p);
    if (!number(p, offset)) return false;
    skip_ws(p);
    if (!number(p, size)) return false;
    skip_ws(p);
    return p == e;
}

struct IndexEntry {
    std::uint64_t offset;
    std::uint64_t size;
    std::uint32_t file;
    std::uint64_t line;  // 1-based within its index file
};

}  // namespace

TfRecordSource::TfRecordSource(const Communicator& comm, std::vector<std::string> paths,
                               TfRecordOptions options)
    : impl_(std::make_unique<Impl>()) {
    auto& im = *impl_;
    im.paths = std::move(paths);
    im.options = std::move(options);
    const int rank = comm.rank();
    const int world = comm.size();

    // 1. Options: valid and identical on every rank.
    run_agreed(comm, [&] {
        im.options.validate();
        if (im.paths.empty()) throw ConfigError("tfrecord: no input files");
        if (im.paths.size() > UINT32_MAX) throw ConfigError("tfrecord: too many files");
        if (!im.options.index_paths.empty() && im.options.index_paths.size() != im.paths.size()) {
            throw ConfigError("tfrecord: " + std::to_string(im.options.index_paths.size()) +
                              " index files for " + std::to_string(im.paths.size()) +
                              " data files (one per data file)");
        }
    });
    const std::uint64_t sig = fnv1a64(options_signature(im.paths, im.options));
    if (comm.allreduce_min(sig) != comm.allreduce_max(sig)) {
        throw ConfigError("tfrecord: ranks passed different paths or options");
    }
    if (im.options.features.empty()) {
        FieldInfo f;
        f.name = im.options.raw_field_name;
        f.dtype = DType::uint8;
        f.ragged = true;
        im.fields.push_back(f);
    } else {
        im.decoder = std::make_unique<ExampleDecoder>(im.options.features);
        im.fields = im.decoder->fields();
    }
    int thread_level = MPI_THREAD_SINGLE;
    check_mpi(MPI_Query_thread(&thread_level), "MPI_Query_thread");
    im.mpi_reads = !im.options.posix_reads && thread_level == MPI_THREAD_MULTIPLE;

    // 2. Open: POSIX first (clear per-file errors, agreed), then MPI_File_open collectively.
    im.files.resize(im.paths.size());
    im.gz_data.resize(im.paths.size());
    try {
        run_agreed(comm, [&] {
            for (std::size_t i = 0; i < im.paths.size(); ++i) {
                auto& f = im.files[i];
                f.path = im.paths[i];
                f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
                if (f.fd < 0) {
                    throw IoError("tfrecord: cannot open " + f.path + ": " + errno_text(errno));
                }
                struct stat st;
                if (::fstat(f.fd, &st) != 0) {
                    throw IoError("tfrecord: cannot stat " + f.path + ": " + errno_text(errno));
                }
                if (!S_ISREG(st.st_mode)) {
                    throw IoError("tfrecord: " + f.path + " is not a regular file");
                }
            }
        });
        for (auto& f : im.files) {
            const int rc =
                MPI_File_open(comm.get(), f.path.c_str(), MPI_MODE_RDONLY, MPI_INFO_NULL, &f.fh);
            LocalStatus status;
            if (rc != MPI_SUCCESS) {
                f.fh = MPI_FILE_NULL;
                try {
                    check_mpi(rc, ("MPI_File_open(" + f.path + ")").c_str());
                } catch (...) {
                    status = LocalStatus::from_current_exception();
                }
            } else {
                MPI_File_set_errhandler(f.fh, MPI_ERRORS_RETURN);
            }
            // A rank whose open failed holds no handle; the others keep theirs open (closing
            // would be collective over a mismatched set), which leaks only on this error path.
            agree_or_throw(comm, status);
        }
        run_agreed(comm, [&] {
            for (auto& f : im.files) {
                MPI_Offset size = 0;
                check_mpi(MPI_File_get_size(f.fh, &size), "MPI_File_get_size");
                f.size = static_cast<std::uint64_t>(size);
                if (f.size == 0) {
                    throw FormatError("tfrecord: " + f.path +
                                      ": empty file, not a TFRecord (no record at offset 0)");
                }
            }
        });
        std::uint64_t size_sig = 0;
        for (const auto& f : im.files) size_sig = mix64(size_sig ^ f.size);
        if (comm.allreduce_min(size_sig) != comm.allreduce_max(size_sig)) {
            throw ConfigError("tfrecord: ranks see different file sizes (files changing?)");
        }
        im.starts.assign(im.files.size() + 1, 0);
        for (std::size_t i = 0; i < im.files.size(); ++i) {
            im.starts[i + 1] = im.starts[i] + im.files[i].size;
        }

        // 3. Gzip detection: rank 0 reads the magic of every file, then broadcasts.
        std::string gz_flags(im.files.size(), '0');
        run_agreed(comm, [&] {
            if (rank != 0) return;
            for (std::size_t i = 0; i < im.files.size(); ++i) {
                bool gz = ends_with(im.files[i].path, ".gz");
                if (!gz && im.files[i].size >= 2) {
                    std::uint8_t magic[2] = {0, 0};
                    im.read_at(i, 0, magic, 2, true);
                    gz = magic[0] == 0x1f && magic[1] == 0x8b;
                }
                gz_flags[i] = gz ? '1' : '0';
            }
        });
        gz_flags = comm.broadcast(gz_flags, 0);
        bool any_gz = false;
        for (std::size_t i = 0; i < im.files.size(); ++i) {
            im.files[i].gz = gz_flags[i] == '1';
            any_gz = any_gz || im.files[i].gz;
        }
        if (any_gz && !im.options.index_paths.empty()) {
            throw ConfigError("tfrecord: index files cannot be used with gzip TFRecord files");
        }

        tfrecord::ScanOptions so;
        so.on_corrupt = im.options.on_corrupt;
        so.verify_payloads =
            im.options.verify_payloads_at_open ||
            (im.options.on_corrupt == OnCorrupt::skip && im.options.verify_payload_crc);
        so.window_bytes = im.options.scan_window_bytes;
        std::vector<tfrecord::ScanFile> scan_files(im.files.size());
        for (std::size_t i = 0; i < im.files.size(); ++i) {
            scan_files[i].name = im.files[i].path;
            scan_files[i].size_bytes = im.files[i].size;
            scan_files[i].whole = im.files[i].gz;
            const Impl* self = &im;
            scan_files[i].read = [self, i](std::uint64_t off, void* dst, std::uint64_t n) {
                self->read_at(i, off, dst, n, true);
            };
        }
        const std::uint64_t total = im.starts.back();
        const std::uint64_t my_begin = tfrecord::cut_begin(total, rank, world);
        const std::uint64_t my_end = tfrecord::cut_begin(total, rank + 1, world);

        std::vector<RecordRef> local;
        std::uint64_t local_skipped = 0;
        if (im.options.index_paths.empty()) {
            // 4a. Index-free split with the start agreement (see the header).
            tfrecord::CutScan scan;
            run_agreed(comm, [&] { scan = tfrecord::scan_cut(scan_files, my_begin, my_end, so); });
            for (;;) {
                const auto starts = comm.allgather(scan.start);
                const auto stops = comm.allgather(scan.stop);
                const auto broken_u64 = comm.allgather(scan.broken ? 1 : 0);
                const std::vector<std::uint8_t> broken(broken_u64.begin(), broken_u64.end());
                const int m = tfrecord::first_mismatch(starts, stops, broken);
                if (m < 0) break;
                ++im.rounds;
                run_agreed(comm, [&] {
                    if (rank == m) {
                        const std::uint64_t from =
                            m == 0 ? 0 : stops[static_cast<std::size_t>(m - 1)];
                        scan = tfrecord::walk_cut(scan_files, from, my_end, so, true);
                    }
                });
            }
            local = std::move(scan.records);
            local_skipped = scan.skipped;
            // Gzip files whose first byte is in this cut: decompress, index, keep the bytes.
            run_agreed(comm, [&] {
                for (auto f : scan.whole_files) {
                    auto data = im.gz(f, true);
                    std::vector<tfrecord::ScanFile> one{tfrecord::memory_file(
                        im.files[f].path + " (decompressed)", data->data(), data->size())};
                    if (data->empty()) {
                        throw FormatError("tfrecord: " + im.files[f].path +
                                          ": decompresses to an empty stream (no record at "
                                          "offset 0)");
                    }
                    auto walk = tfrecord::walk_cut(one, 0, data->size(), so);
                    for (auto& r : walk.records) {
                        r.file = f;
                        local.push_back(r);
                    }
                    local_skipped += walk.skipped;
                }
                std::stable_sort(
                    local.begin(), local.end(), [](const RecordRef& a, const RecordRef& b) {
                        return a.file != b.file ? a.file < b.file : a.offset < b.offset;
                    });
            });
        } else {
            // 4b. DALI index files: rank r parses the lines that start in its slice of the
            // concatenated index bytes, and validates them against the data.
            std::vector<int> ifds(im.options.index_paths.size(), -1);
            std::vector<std::uint64_t> isizes(ifds.size(), 0);
            std::vector<IndexEntry> entries;
            std::vector<std::uint64_t> line_counts(ifds.size(), 0);
            auto close_ifds = [&] {
                for (int& fd : ifds) {
                    if (fd >= 0) ::close(fd);
                    fd = -1;
                }
            };
            LocalStatus st;
            try {
                for (std::size_t i = 0; i < ifds.size(); ++i) {
                    const auto& p = im.options.index_paths[i];
                    ifds[i] = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
                    if (ifds[i] < 0) {
                        throw IoError("tfrecord: cannot open index " + p + ": " +
                                      errno_text(errno));
                    }
                    struct stat sb;
                    if (::fstat(ifds[i], &sb) != 0) {
                        throw IoError("tfrecord: cannot stat index " + p + ": " +
                                      errno_text(errno));
                    }
                    isizes[i] = static_cast<std::uint64_t>(sb.st_size);
                }
                std::vector<std::uint64_t> istarts(ifds.size() + 1, 0);
                for (std::size_t i = 0; i < ifds.size(); ++i)
                    istarts[i + 1] = istarts[i] + isizes[i];
                const std::uint64_t itotal = istarts.back();
                const std::uint64_t b = tfrecord::cut_begin(itotal, rank, world);
                const std::uint64_t e = tfrecord::cut_begin(itotal, rank + 1, world);
                for (std::size_t i = 0; i < ifds.size(); ++i) {
                    const std::uint64_t lb = std::max(b, istarts[i]);
                    const std::uint64_t le = std::min(e, istarts[i + 1]);
                    if (lb >= le) continue;
                    // Read the slice plus the byte before it (line start test) and up to the
                    // end of the last line that starts inside it.
                    std::uint64_t from = lb - istarts[i];
                    const std::uint64_t to_min = le - istarts[i];
                    const std::uint64_t read_from = from > 0 ? from - 1 : 0;
                    std::string text;
                    std::uint64_t to = to_min;
                    for (;;) {
                        text.resize(static_cast<std::size_t>(to - read_from));
                        pread_exact(ifds[i], im.options.index_paths[i], read_from, text.data(),
                                    to - read_from, im.options.max_read_bytes);
                        if (to >= isizes[i] || text.back() == '\n') break;
                        const auto nl =
                            text.find('\n', static_cast<std::size_t>(to_min - read_from));
                        if (nl != std::string::npos) break;
                        to = std::min(isizes[i], to + 4096);
                    }
                    std::size_t pos = static_cast<std::size_t>(from - read_from);
                    if (from > 0 && text[pos - 1] != '\n') {
                        const auto nl = text.find('\n', pos);
                        pos = nl == std::string::npos ? text.size() : nl + 1;
                    }
                    const std::size_t limit = static_cast<std::size_t>(to_min - read_from);
                    while (pos < limit && pos < text.size()) {
                        auto nl = text.find('\n', pos);
                        if (nl == std::string::npos) nl = text.size();
                        IndexEntry en{0, 0, static_cast<std::uint32_t>(i), line_counts[i]};
                        ++line_counts[i];
                        const char* lb_ptr = text.data() + pos;
                        const char* le_ptr = text.data() + nl;
                        bool blank = true;
                        for (const char* c = lb_ptr; c < le_ptr; ++c) {
                            if (*c != ' ' && *c != '\t' && *c != '\r') blank = false;
                        }
                        if (!blank) {
                            if (!parse_index_line(lb_ptr, le_ptr, en.offset, en.size)) {
                                en.size = UINT64_MAX;  // reported after line numbers are known
                                en.offset = UINT64_MAX;
                            }
                            entries.push_back(en);
                        }
                        pos = nl + 1;
                    }
                }
            } catch (...) {
                st = LocalStatus::from_current_exception();
            }
            close_ifds();
            agree_or_throw(comm, st);
            // Line numbers: per index file, the lines before this rank's slice.
            std::vector<std::uint64_t> line_base(line_counts.size(), 0);
            check_mpi(
                MPI_Exscan(line_counts.data(), line_base.data(),
                           static_cast<int>(line_counts.size()), MPI_UINT64_T, MPI_SUM, comm.get()),
                "MPI_Exscan(index lines)");
            if (rank == 0) std::fill(line_base.begin(), line_base.end(), 0);
            run_agreed(comm, [&] {
                std::vector<std::unique_ptr<std::vector<std::uint8_t>>> unused;
                const IndexEntry* prev = nullptr;
                for (auto& en : entries) {
                    en.line += line_base[en.file] + 1;
                    const auto& f = im.files[en.file];
                    const std::string where = "tfrecord: index " + im.options.index_paths[en.file] +
                                              " line " + std::to_string(en.line) + " (data file " +
                                              f.path + "): ";
                    if (en.size == UINT64_MAX && en.offset == UINT64_MAX) {
                        throw FormatError(where + "malformed line (expected \"<offset> <size>\")");
                    }
                    if (en.size < kFramingBytes) {
                        throw FormatError(where + "size " + std::to_string(en.size) +
                                          " is smaller than the 16 framing bytes");
                    }
                    if (en.offset > f.size || en.size > f.size - en.offset) {
                        throw FormatError(where + "record at offset " + std::to_string(en.offset) +
                                          " of size " + std::to_string(en.size) +
                                          " ends past end of file (" + std::to_string(f.size) +
                                          " bytes)");
                    }
                    if (prev != nullptr && prev->file == en.file &&
                        en.offset != prev->offset + prev->size) {
                        throw FormatError(where + "record at offset " + std::to_string(en.offset) +
                                          " does not start where the previous one ends (" +
                                          std::to_string(prev->offset + prev->size) + ")");
                    }
                    std::uint8_t h[kHeaderBytes];
                    im.read_at(en.file, en.offset, h, kHeaderBytes, true);
                    std::uint64_t length = 0;
                    const auto hs = tfrecord::check_header(h, en.offset, f.size, length);
                    if (hs == tfrecord::HeaderStatus::bad_length_crc &&
                        im.options.on_corrupt == OnCorrupt::skip) {
                        ++local_skipped;
                        prev = &en;
                        continue;
                    }
                    if (hs != tfrecord::HeaderStatus::ok || length != en.size - kFramingBytes) {
                        throw FormatError(where + "does not match the data: at offset " +
                                          std::to_string(en.offset) + " the length field reads " +
                                          std::to_string(load_le64(h)) + " (" +
                                          tfrecord::to_string(hs) + "), the index says " +
                                          std::to_string(en.size - kFramingBytes));
                    }
                    if (length > UINT32_MAX) {
                        throw FormatError(where + "record exceeds the 4 GiB limit");
                    }
                    if (so.verify_payloads) {
                        std::vector<std::uint8_t> buf(static_cast<std::size_t>(length + 4));
                        im.read_at(en.file, en.offset + kHeaderBytes, buf.data(), buf.size(), true);
                        if (masked_crc32c(buf.data(), length) != load_le32(buf.data() + length)) {
                            if (im.options.on_corrupt == OnCorrupt::error) {
                                throw FormatError("tfrecord: " + f.path +
                                                  ": payload CRC32C mismatch in record at "
                                                  "offset " +
                                                  std::to_string(en.offset) + " (length " +
                                                  std::to_string(length) + ")");
                            }
                            ++local_skipped;
                            prev = &en;
                            continue;
                        }
                    }
                    local.push_back(
                        RecordRef{en.offset, static_cast<std::uint32_t>(length), en.file});
                    prev = &en;
                }
            });
            // Tiling across slices and files: checked after the exchange below.
        }

        // 5. Exchange descriptors: every rank can read any id (16 B × N per rank).
        im.skipped = comm.allreduce_sum(local_skipped);
        const auto counts = comm.allgather(local.size());
        std::uint64_t n = 0;
        for (auto c : counts) n += c;
        run_agreed(comm, [&] {
            for (auto c : counts) {
                if (c > static_cast<std::uint64_t>(INT_MAX)) {
                    throw ConfigError("tfrecord: more than 2^31 records on one rank");
                }
            }
            if (n > static_cast<std::uint64_t>(INT_MAX) * 16) {
                throw ConfigError("tfrecord: too many records for one exchange");
            }
            im.records.resize(static_cast<std::size_t>(n));
        });
        std::vector<int> rc(static_cast<std::size_t>(world));
        std::vector<int> displs(static_cast<std::size_t>(world));
        std::uint64_t acc = 0;
        for (int r = 0; r < world; ++r) {
            rc[static_cast<std::size_t>(r)] = static_cast<int>(counts[static_cast<std::size_t>(r)]);
            displs[static_cast<std::size_t>(r)] = static_cast<int>(acc);
            acc += counts[static_cast<std::size_t>(r)];
        }
        if (acc > static_cast<std::uint64_t>(INT_MAX)) {
            throw ConfigError("tfrecord: more than 2^31 records in all (displacements overflow)");
        }
        MPI_Datatype rec_type = MPI_DATATYPE_NULL;
        check_mpi(MPI_Type_contiguous(16, MPI_BYTE, &rec_type), "MPI_Type_contiguous");
        check_mpi(MPI_Type_commit(&rec_type), "MPI_Type_commit");
        const int grc =
            MPI_Allgatherv(local.data(), static_cast<int>(local.size()), rec_type,
                           im.records.data(), rc.data(), displs.data(), rec_type, comm.get());
        MPI_Type_free(&rec_type);
        check_mpi(grc, "MPI_Allgatherv(record descriptors)");

        // 6. Global checks on the identical descriptor list (same outcome on every rank).
        run_agreed(comm, [&] {
            if (!im.options.index_paths.empty()) {
                std::vector<std::uint64_t> expect(im.files.size(), 0);
                std::vector<std::uint64_t> seen(im.files.size(), 0);
                for (std::size_t k = 0; k < im.records.size(); ++k) {
                    const auto& r = im.records[k];
                    ++seen[r.file];
                    if (k > 0 && im.records[k - 1].file > r.file) {
                        throw FormatError("tfrecord: index files are out of order");
                    }
                    if (r.offset != expect[r.file] && im.options.on_corrupt == OnCorrupt::error) {
                        throw FormatError("tfrecord: index " + im.options.index_paths[r.file] +
                                          " entry " + std::to_string(seen[r.file]) +
                                          ": record at offset " + std::to_string(r.offset) +
                                          " does not start where the previous one ends (" +
                                          std::to_string(expect[r.file]) + ")");
                    }
                    expect[r.file] = r.offset + kFramingBytes + r.length;
                }
                if (im.options.on_corrupt == OnCorrupt::error) {
                    for (std::size_t f = 0; f < im.files.size(); ++f) {
                        if (expect[f] != im.files[f].size) {
                            throw FormatError("tfrecord: index " + im.options.index_paths[f] +
                                              " covers " + std::to_string(expect[f]) +
                                              " bytes of " + im.files[f].path + ", which has " +
                                              std::to_string(im.files[f].size) +
                                              " (index of another file?)");
                        }
                    }
                }
            }
            if (im.records.empty()) {
                throw FormatError("tfrecord: no valid records in " +
                                  std::to_string(im.files.size()) +
                                  " file(s) (first: " + im.files[0].path + ", " +
                                  std::to_string(im.skipped) + " skipped)");
            }
        });
    } catch (...) {
        close_files(im.files);
        throw;
    }

    std::ostringstream fp;
    fp << "tfrecord;n=" << im.records.size() << ";skipped=" << im.skipped;
    for (const auto& f : im.files) fp << ';' << f.path << ':' << f.size << (f.gz ? ":gz" : "");
    for (const auto& f : im.fields) {
        fp << ";field:" << f.name << ':' << dtype_name(f.dtype) << ':' << f.ragged;
        for (auto d : f.sample_shape) fp << 'x' << d;
    }
    im.fingerprint = fp.str();
}

TfRecordSource::~TfRecordSource() {
    if (impl_) close();
}

void TfRecordSource::close() noexcept {
    if (!impl_ || impl_->closed) return;
    close_files(impl_->files);
    impl_->closed = true;
}

const std::vector<FieldInfo>& TfRecordSource::fields() const {
    return impl_->fields;
}
std::uint64_t TfRecordSource::num_samples() const {
    return impl_->records.size();
}
std::uint64_t TfRecordSource::total_bytes() const {
    return impl_->starts.back();
}
std::uint64_t TfRecordSource::skipped_records() const noexcept {
    return impl_->skipped;
}
const std::vector<std::string>& TfRecordSource::paths() const noexcept {
    return impl_->paths;
}
bool TfRecordSource::file_is_gzip(std::size_t file) const {
    return file < impl_->files.size() && impl_->files[file].gz;
}
int TfRecordSource::resync_rounds() const noexcept {
    return impl_->rounds;
}
std::string TfRecordSource::fingerprint() const {
    return impl_->fingerprint;
}

tfrecord::RecordRef TfRecordSource::record(std::uint64_t id) const {
    if (id >= impl_->records.size()) {
        throw ConfigError("tfrecord: record id " + std::to_string(id) +
                          " out of range (N = " + std::to_string(impl_->records.size()) + ")");
    }
    return impl_->records[id];
}

std::uint64_t TfRecordSource::records_in_cut(int rank, int world_size) const {
    if (world_size < 1 || rank < 0 || rank >= world_size) return 0;
    const auto& im = *impl_;
    const std::uint64_t total = im.starts.back();
    const std::uint64_t b = tfrecord::cut_begin(total, rank, world_size);
    const std::uint64_t e = tfrecord::cut_begin(total, rank + 1, world_size);
    auto first_at = [&](std::uint64_t x) {
        return std::partition_point(im.records.begin(), im.records.end(),
                                    [&](const RecordRef& r) { return im.cut_position(r) < x; });
    };
    return static_cast<std::uint64_t>(first_at(e) - first_at(b));
}

std::uint64_t TfRecordSource::sample_bytes(std::uint64_t id) const {
    const auto r = record(id);
    if (!impl_->decoder) return r.length;
    std::uint64_t sum = 0;
    for (const auto& f : impl_->fields) {
        if (f.ragged) return r.length;
        sum += f.sample_bytes;
    }
    return sum;
}

void TfRecordSource::read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const {
    const auto& im = *impl_;
    thread_local std::vector<std::uint8_t> buf;
    for (std::size_t k = 0; k < count; ++k) {
        const RecordRef r = record(ids[k]);
        const auto& f = im.files[r.file];
        const std::uint64_t bytes = r.length + kFramingBytes;
        const std::uint8_t* rec = nullptr;
        std::shared_ptr<const std::vector<std::uint8_t>> gz;
        if (f.gz) {
            gz = im.gz(r.file, false);
            if (r.offset + bytes > gz->size()) {
                throw FormatError("tfrecord: " + f.path +
                                  ": decompressed stream shorter than "
                                  "its index (record at offset " +
                                  std::to_string(r.offset) + ")");
            }
            rec = gz->data() + r.offset;
        } else {
            if (buf.size() < bytes) buf.resize(static_cast<std::size_t>(bytes));
            im.read_at(r.file, r.offset, buf.data(), bytes, false);
            rec = buf.data();
        }
        const std::string name = f.gz ? f.path + " (decompressed)" : f.path;
        std::uint64_t length = 0;
        if (tfrecord::check_header(rec, 0, bytes, length) != tfrecord::HeaderStatus::ok ||
            length != r.length) {
            throw FormatError("tfrecord: " + name + ": record header at offset " +
                              std::to_string(r.offset) + " changed since open");
        }
        if (im.options.verify_payload_crc && masked_crc32c(rec + kHeaderBytes, r.length) !=
                                                 load_le32(rec + kHeaderBytes + r.length)) {
            throw FormatError(
                "tfrecord: " + name + ": payload CRC32C mismatch in record at offset " +
                std::to_string(r.offset) + " (length " + std::to_string(r.length) + ")");
        }
        if (im.decoder) {
            im.decoder->decode(rec + kHeaderBytes, r.length, sink, k,
                               name + " record at offset " + std::to_string(r.offset));
        } else {
            std::byte* dst = sink.ragged(0, k, r.length);
            if (r.length > 0) std::memcpy(dst, rec + kHeaderBytes, r.length);
        }
    }
}

void write_dali_index(const Communicator& comm, const std::vector<std::string>& data_paths,
                      const std::vector<std::string>& index_paths) {
    if (data_paths.size() != index_paths.size()) {
        throw ConfigError("tfrecord index: " + std::to_string(index_paths.size()) +
                          " index paths for " + std::to_string(data_paths.size()) + " files");
    }
    TfRecordSource src(comm, data_paths, TfRecordOptions{});
    run_agreed(comm, [&] {
        for (std::size_t f = 0; f < data_paths.size(); ++f) {
            if (src.file_is_gzip(f)) {
                throw ConfigError("tfrecord index: " + data_paths[f] +
                                  " is gzip-compressed; DALI indexes plain files only");
            }
        }
    });
    run_agreed(comm, [&] {
        if (comm.rank() != 0) return;
        std::vector<std::ofstream> outs;
        for (const auto& p : index_paths) {
            outs.emplace_back(p, std::ios::binary | std::ios::trunc);
            if (!outs.back()) {
                throw IoError("tfrecord index: cannot write " + p + ": " + errno_text(errno));
            }
        }
        for (std::uint64_t id = 0; id < src.num_samples(); ++id) {
            const auto r = src.record(id);
            outs[r.file] << r.offset << ' ' << (r.length + kFramingBytes) << '\n';
        }
        for (std::size_t i = 0; i < outs.size(); ++i) {
            outs[i].flush();
            if (!outs[i]) throw IoError("tfrecord index: write to " + index_paths[i] + " failed");
        }
    });
    src.close();
}

}  // namespace mpistage
