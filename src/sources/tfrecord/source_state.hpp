#pragma once
// State of an open TfRecordSource and the collective steps of its open, one function per
// concept (internal; see tfrecord_source.hpp for the behaviour).

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/node_segment.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "sources/tfrecord/example_codec.hpp"
#include "sources/tfrecord/framing.hpp"
#include "util/posix_file.hpp"

namespace mpistage::tfrecord {

/// Move-only owner of an `MPI_File` opened collectively. `close()` is collective; the
/// destructor is a noexcept fallback that closes it only while MPI is initialised.
class MpiFile {
public:
    MpiFile() = default;
    /// Owns `fh`, opened on `comm`: its close is watched with `comm`'s timeout.
    MpiFile(MPI_File fh, const Communicator& comm) noexcept
        : fh_(fh), timeout_(comm.timeout()), ranks_(comm.size()) {}
    MpiFile(MpiFile&& o) noexcept
        : fh_(std::exchange(o.fh_, MPI_FILE_NULL)), timeout_(o.timeout_), ranks_(o.ranks_) {}
    MpiFile& operator=(MpiFile&& o) noexcept;
    MpiFile(const MpiFile&) = delete;
    MpiFile& operator=(const MpiFile&) = delete;
    ~MpiFile() { close_noexcept(); }

    MPI_File get() const noexcept { return fh_; }
    /// Collective over the file's communicator, under a `BlockingWatch` (a rank that never
    /// arrives ends the job after the timeout). @throws MpiError.
    void close();
    /// Collective (watched like `close()`), never throws (destructor and error paths where every
    /// rank closes).
    void close_noexcept() noexcept;
    /// Gives up the handle without closing it: when some ranks failed to open, a collective
    /// close over the mismatched set would hang, so the handle leaks on that error path only.
    void release() noexcept { fh_ = MPI_FILE_NULL; }

private:
    MPI_File fh_ = MPI_FILE_NULL;
    std::chrono::seconds timeout_{0};  // the watchdog deadline of MPI_File_close
    int ranks_ = 1;
};

/// One data file: both handles, its size, and whether it is a whole-file gzip TFRecord.
struct DataFile {
    std::string path;
    std::uint64_t size = 0;
    bool gz = false;
    detail::PosixFile posix;
    MpiFile mpi;
};

/// Everything an open source holds.
struct SourceState {
    TfRecordOptions options;
    std::vector<std::string> paths;
    std::vector<DataFile> files;
    std::vector<std::uint64_t> starts;  // F+1 positions in the concatenated (compressed) space
    /// The node map of the descriptor window (kept while the window lives).
    detail::NodeMap descriptor_nodes;
    /// The node's copy of every descriptor (one contiguous array of `num_records` RecordRefs);
    /// `records` points into it (null once closed).
    detail::NodeSegment descriptor_window;
    const RecordRef* records = nullptr;
    std::uint64_t num_records = 0;
    std::vector<FieldInfo> fields;
    std::unique_ptr<ExampleDecoder> decoder;
    std::uint64_t skipped = 0;
    std::uint64_t skipped_bytes = 0;
    int rounds = 0;
    bool mpi_reads = false;
    /// Serialises the independent MPI-IO reads of the I/O threads (`mpi_reads`): Open MPI's
    /// ompio keeps a file handle's offset state unlocked, so two threads reading one handle at
    /// once crashed inside MPI_File_read_at (SEGV in mca_common_ompio_set_explicit_offset, seen
    /// under ASan in mpi.loader.test_loader_budget_pipeline), MPI_THREAD_MULTIPLE or not.
    mutable std::mutex mpi_read_mutex;
    /// Held shared by every `TfRecordSource::read` and exclusively by `close()`, so a close
    /// waits for the reads in flight (a loader's I/O threads) instead of freeing the MPI file
    /// handles and the descriptor window under them; reads after it throw ConfigError.
    mutable std::shared_mutex lifetime;
    std::string fingerprint;
    mutable std::mutex gz_mutex;
    mutable std::vector<std::shared_ptr<const std::vector<std::uint8_t>>> gz_data;
    bool closed = false;

    /// Reads exactly `n` bytes at `off` of file `f` (MPI-IO from the main thread or when MPI is
    /// thread-multiple and allowed, pread otherwise), in pieces of `max_read_bytes`.
    void read_at(std::size_t f, std::uint64_t off, void* dst, std::uint64_t n,
                 bool main_thread) const;
    /// The decompressed bytes of gzip file `f`, inflated on first use and kept.
    std::shared_ptr<const std::vector<std::uint8_t>> gz(std::size_t f, bool main_thread) const;
    /// Position of a record in the concatenated byte space (its file's start for gzip).
    std::uint64_t cut_position(const RecordRef& r) const;
    /// Scan knobs from the options (payload checks forced on under skip).
    ScanOptions scan_options() const;
    /// The data files as scan inputs (read from the main thread).
    std::vector<ScanFile> scan_files() const;
};

/// What this rank found before the descriptor exchange.
struct LocalRecords {
    std::vector<RecordRef> records;
    std::uint64_t skipped = 0;
    std::uint64_t skipped_bytes = 0;
};

/// Collective: options valid and identical on every rank (paths, index paths, every field).
/// @throws ConfigError, identically on every rank.
void check_options(const Communicator& comm, const std::vector<std::string>& paths,
                   const TfRecordOptions& options);
/// Collective: probes (no FIFO is ever opened), opens every file with POSIX and MPI-IO, checks
/// sizes (non-empty, equal on every rank) and sets `files` and `starts`.
/// @throws ConfigError, IoError, FormatError, identically on every rank.
void open_data_files(const Communicator& comm, SourceState& state);
/// Collective: rank 0 reads each file's magic (or name suffix) and broadcasts the gzip flags.
void detect_gzip(const Communicator& comm, SourceState& state);
/// Collective: the index-free split (scan, agreement, gzip files owned by this rank).
LocalRecords scan_index_free(const Communicator& comm, SourceState& state);
/// Collective: this rank's slice of the DALI index files, validated against the data.
LocalRecords read_dali_index(const Communicator& comm, const SourceState& state);
/// Collective: gathers every rank's descriptors into the node-shared `descriptor_window`
/// (`state.records`, id order), sums the skips and runs the global checks.
/// @throws FormatError/ConfigError identically on every rank.
void exchange_descriptors(const Communicator& comm, SourceState& state, LocalRecords local);

}  // namespace mpistage::tfrecord
