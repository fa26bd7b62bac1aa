// TfRecordSource files: handles, reads, option agreement, open, gzip detection.
#include <algorithm>
#include <sstream>

#include "comm/agree.hpp"
#include "comm/blocking_watch.hpp"
#include "mpistage/error.hpp"
#include "sources/tfrecord/gzip_stream.hpp"
#include "sources/tfrecord/source_state.hpp"
#include "util/descriptor_limit.hpp"
#include "util/file_identity.hpp"
#include "util/input_file.hpp"

namespace mpistage::tfrecord {

namespace {

bool mpi_alive() noexcept {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    return initialized != 0 && finalized == 0;
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

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string options_signature(const TfRecordOptions& o) {
    std::ostringstream s;
    s << "on_corrupt=" << to_string(o.on_corrupt) << ";verify_payload_crc=" << o.verify_payload_crc
      << ";verify_payloads_at_open=" << o.verify_payloads_at_open
      << ";raw_field_name=" << o.raw_field_name << ";max_read_bytes=" << o.max_read_bytes
      << ";scan_window_bytes=" << o.scan_window_bytes << ";posix_reads=" << o.posix_reads
      << ";max_decompressed_bytes=" << o.max_decompressed_bytes
      << ";max_decompression_ratio=" << o.max_decompression_ratio
      << ";descriptor_ranks_per_node=" << o.descriptor_ranks_per_node;
    for (const auto& f : o.features) {
        s << ";feature:" << f.name << ':' << to_string(f.kind) << ':' << dtype_name(f.dtype) << ':'
          << f.ragged;
        for (auto d : f.shape) s << 'x' << d;
    }
    return s.str();
}

std::string joined(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += s + '\n';
    return out;
}

}  // namespace

MpiFile& MpiFile::operator=(MpiFile&& o) noexcept {
    if (this != &o) {
        close_noexcept();
        fh_ = std::exchange(o.fh_, MPI_FILE_NULL);
        timeout_ = o.timeout_;
        ranks_ = o.ranks_;
    }
    return *this;
}

void MpiFile::close() {
    if (fh_ == MPI_FILE_NULL) return;
    const detail::BlockingWatch watch(timeout_, ranks_, "MPI_File_close", "teardown: close a file");
    check_mpi(MPI_File_close(&fh_), "MPI_File_close");
    fh_ = MPI_FILE_NULL;
}

void MpiFile::close_noexcept() noexcept {
    if (fh_ != MPI_FILE_NULL && mpi_alive()) {
        const detail::BlockingWatch watch(timeout_, ranks_, "MPI_File_close",
                                          "teardown: close a file");
        MPI_File_close(&fh_);
    }
    fh_ = MPI_FILE_NULL;
}

void SourceState::read_at(std::size_t f, std::uint64_t off, void* dst, std::uint64_t n,
                          bool main_thread) const {
    const auto& fs = files[f];
    if (fs.mpi.get() != MPI_FILE_NULL && (mpi_reads || main_thread)) {
        const std::lock_guard<std::mutex> one_reader(mpi_read_mutex);
        mpi_read_exact(fs.mpi.get(), fs.path, off, dst, n, options.max_read_bytes);
        return;
    }
    auto* p = static_cast<std::byte*>(dst);
    for (std::uint64_t done = 0; done < n;) {
        const std::uint64_t want = std::min(n - done, options.max_read_bytes);
        fs.posix.read_exact(p + done, want, off + done, "tfrecord");
        done += want;
    }
}

std::shared_ptr<const std::vector<std::uint8_t>> SourceState::gz(std::size_t f,
                                                                 bool main_thread) const {
    {
        std::lock_guard<std::mutex> lock(gz_mutex);
        if (gz_data[f]) return gz_data[f];
    }
    GzipLimits limits;
    limits.max_decompressed_bytes = options.max_decompressed_bytes;
    limits.max_decompression_ratio = options.max_decompression_ratio;
    limits.piece_bytes = std::min<std::uint64_t>(limits.piece_bytes, options.max_read_bytes);
    auto data = std::make_shared<const std::vector<std::uint8_t>>(inflate_tfrecord(
        files[f].path, files[f].size,
        [&](std::uint64_t off, void* dst, std::uint64_t n) {
            read_at(f, off, dst, n, main_thread);
        },
        limits, options.on_corrupt));
    std::lock_guard<std::mutex> lock(gz_mutex);
    if (!gz_data[f]) gz_data[f] = data;
    return gz_data[f];
}

std::uint64_t SourceState::cut_position(const RecordRef& r) const {
    return files[r.file].gz ? starts[r.file] : starts[r.file] + r.offset;
}

ScanOptions SourceState::scan_options() const {
    ScanOptions so;
    so.on_corrupt = options.on_corrupt;
    so.verify_payloads = options.verify_payloads_at_open ||
                         (options.on_corrupt == OnCorrupt::skip && options.verify_payload_crc);
    so.window_bytes = options.scan_window_bytes;
    return so;
}

std::vector<ScanFile> SourceState::scan_files() const {
    std::vector<ScanFile> out(files.size());
    for (std::size_t i = 0; i < files.size(); ++i) {
        out[i].name = files[i].path;
        out[i].size_bytes = files[i].size;
        out[i].whole = files[i].gz;
        out[i].read = [this, i](std::uint64_t off, void* dst, std::uint64_t n) {
            read_at(i, off, dst, n, true);
        };
    }
    return out;
}

void check_options(const Communicator& comm, const std::vector<std::string>& paths,
                   const TfRecordOptions& options) {
    run_agreed(comm, [&] {
        options.validate();
        if (paths.empty()) throw ConfigError("tfrecord: no input files");
        if (paths.size() > UINT32_MAX) throw ConfigError("tfrecord: too many files");
        if (!options.index_paths.empty() && options.index_paths.size() != paths.size()) {
            throw ConfigError("tfrecord: " + std::to_string(options.index_paths.size()) +
                              " index files for " + std::to_string(paths.size()) +
                              " data files (one per data file)");
        }
    });
    require_same(comm,
                 {{"paths", joined(paths)},
                  {"index paths", joined(options.index_paths)},
                  {"options", options_signature(options)}},
                 "tfrecord: ranks passed different paths or options",
                 "pass the same files and TfRecordOptions on every rank");
}

void open_data_files(const Communicator& comm, SourceState& state) {
    state.files.resize(state.paths.size());
    state.gz_data.resize(state.paths.size());
    run_agreed(comm, [&] {
        // Each file is held twice (a POSIX descriptor and an MPI file), index files once.
        const std::uint64_t n = state.paths.size();
        detail::require_descriptors(
            2 * n + state.options.index_paths.size(),
            "'" + state.paths[0] + "'" +
                (n > 1 ? " and " + std::to_string(n - 1) + " other file(s)" : std::string()),
            "tfrecord");
        for (std::size_t i = 0; i < state.paths.size(); ++i) {
            detail::probe_input_file(state.paths[i], "tfrecord");
            state.files[i].path = state.paths[i];
            state.files[i].posix = detail::PosixFile(state.paths[i]);
        }
    });
    for (auto& f : state.files) {
        MPI_File fh = MPI_FILE_NULL;
        const LocalStatus status = capture([&] {
            const detail::BlockingWatch watch(comm, "MPI_File_open(" + f.path + ")");
            const int rc =
                MPI_File_open(comm.get(), f.path.c_str(), MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
            // MPI-IO says "MPI_ERR_OTHER" when it ran out of descriptors: say so.
            check_mpi(rc, ("MPI_File_open(" + f.path + ")" +
                           (rc == MPI_SUCCESS ? std::string() : detail::descriptor_note()))
                              .c_str());
            f.mpi = MpiFile(fh, comm);
            check_mpi(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN), "MPI_File_set_errhandler");
        });
        try {
            agree_or_throw(comm, status);
        } catch (...) {
            f.mpi.release();
            throw;
        }
    }
    run_agreed(comm, [&] {
        for (auto& f : state.files) {
            MPI_Offset size = 0;
            check_mpi(MPI_File_get_size(f.mpi.get(), &size), "MPI_File_get_size");
            f.size = static_cast<std::uint64_t>(size);
            if (f.size == 0) {
                throw FormatError("tfrecord: " + f.path +
                                  ": empty file, not a TFRecord (no record at offset 0)");
            }
        }
    });
    // The same bytes on every rank? Another node's copy that differs (or a file rewritten
    // while opening) would make ranks index and read different records: compare size and the
    // hashes of the first and last 64 KiB of every file (detail::file_identity).
    std::vector<NamedValue> identities;
    run_agreed(comm, [&] {
        for (const auto& f : state.files) {
            identities.push_back({"file '" + f.path + "'", detail::file_identity(f.posix)});
        }
    });
    require_same(comm, identities, "tfrecord: a file differs between ranks",
                 "every rank must open the same, unchanging files (another node's copy "
                 "differs, or the file was rewritten while opening)");
    state.starts.assign(state.files.size() + 1, 0);
    for (std::size_t i = 0; i < state.files.size(); ++i) {
        state.starts[i + 1] = state.starts[i] + state.files[i].size;
    }
}

void detect_gzip(const Communicator& comm, SourceState& state) {
    std::string flags(state.files.size(), '0');
    run_agreed(comm, [&] {
        if (comm.rank() != 0) return;
        for (std::size_t i = 0; i < state.files.size(); ++i) {
            bool gz = ends_with(state.files[i].path, ".gz");
            if (!gz && state.files[i].size >= 2) {
                std::uint8_t magic[2] = {0, 0};
                state.read_at(i, 0, magic, 2, true);
                gz = magic[0] == 0x1f && magic[1] == 0x8b;
            }
            flags[i] = gz ? '1' : '0';
        }
    });
    flags = comm.broadcast(flags, 0);
    bool any_gz = false;
    for (std::size_t i = 0; i < state.files.size(); ++i) {
        state.files[i].gz = flags[i] == '1';
        any_gz = any_gz || state.files[i].gz;
    }
    if (any_gz && !state.options.index_paths.empty()) {
        throw ConfigError("tfrecord: index files cannot be used with gzip TFRecord files");
    }
}

}  // namespace mpistage::tfrecord
