// TfRecordSource: the open as a sequence of collective steps (source_state.hpp), descriptor
// access, and independent thread-safe reads. See tfrecord_source.hpp.
#include "mpistage/tfrecord_source.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "comm/agree.hpp"
#include "comm/call_comm.hpp"
#include "sources/tfrecord/crc32c.hpp"
#include "sources/tfrecord/example_codec.hpp"
#include "sources/tfrecord/source_state.hpp"
#include "util/byte_order.hpp"

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
        throw ConfigError(
            "tfrecord options: max_read_bytes must be <= 1 GiB (MPI-IO counts are int)");
    }
    if (scan_window_bytes < 64) throw ConfigError("tfrecord options: scan_window_bytes < 64");
    if (features.empty() && raw_field_name.empty()) {
        throw ConfigError("tfrecord options: raw_field_name is empty");
    }
    if (max_decompressed_bytes < kFramingBytes) {
        throw ConfigError("tfrecord options: max_decompressed_bytes must be >= 16");
    }
    if (descriptor_ranks_per_node < 0) {
        throw ConfigError("tfrecord options: descriptor_ranks_per_node " +
                          std::to_string(descriptor_ranks_per_node) + " is negative");
    }
    for (const auto& f : features) f.validate();
}

struct TfRecordSource::Impl : tfrecord::SourceState {};

namespace {

void make_fields(tfrecord::SourceState& st) {
    if (st.options.features.empty()) {
        FieldInfo f;
        f.name = st.options.raw_field_name;
        f.dtype = DType::uint8;
        f.ragged = true;
        st.fields.push_back(f);
    } else {
        st.decoder = std::make_unique<ExampleDecoder>(st.options.features);
        st.fields = st.decoder->fields();
    }
    int thread_level = MPI_THREAD_SINGLE;
    check_mpi(MPI_Query_thread(&thread_level), "MPI_Query_thread");
    st.mpi_reads = !st.options.posix_reads && thread_level == MPI_THREAD_MULTIPLE;
}

std::string make_fingerprint(const tfrecord::SourceState& st) {
    std::ostringstream fp;
    fp << "tfrecord;n=" << st.num_records << ";skipped=" << st.skipped;
    for (const auto& f : st.files) fp << ';' << f.path << ':' << f.size << (f.gz ? ":gz" : "");
    for (const auto& f : st.fields) {
        fp << ";field:" << f.name << ':' << dtype_name(f.dtype) << ':' << f.ragged;
        for (auto d : f.sample_shape) fp << 'x' << d;
    }
    return fp.str();
}

}  // namespace

TfRecordSource::TfRecordSource(CommRef ref, std::vector<std::string> paths, TfRecordOptions options)
    : impl_(std::make_unique<Impl>()) {
    // Needed only during the call (the files are opened on it and keep their own): the
    // caller's Communicator, or a duplicate of a plain MPI_Comm freed on return (the source's
    // one MPI_Comm_dup).
    const detail::CallComm call(ref);
    const Communicator& comm = call.get();
    auto& st = *impl_;
    st.paths = std::move(paths);
    st.options = std::move(options);
    tfrecord::check_options(comm, st.paths, st.options);
    make_fields(st);
    // On a failure below every rank throws the same agreed error, so the files' destructors
    // close them collectively on every rank.
    tfrecord::open_data_files(comm, st);
    tfrecord::detect_gzip(comm, st);
    auto local = st.options.index_paths.empty() ? tfrecord::scan_index_free(comm, st)
                                                : tfrecord::read_dali_index(comm, st);
    tfrecord::exchange_descriptors(comm, st, std::move(local));
    st.fingerprint = make_fingerprint(st);
}

TfRecordSource::~TfRecordSource() {
    if (impl_) close();
}

void TfRecordSource::close() noexcept {
    if (!impl_ || impl_->closed) return;
    const std::unique_lock<std::shared_mutex> no_reads(impl_->lifetime);
    for (auto& f : impl_->files) f.mpi.close_noexcept();
    impl_->records = nullptr;
    impl_->descriptor_window = detail::NodeSegment();  // MPI_Win_free, collective
    impl_->closed = true;
}

const std::vector<FieldInfo>& TfRecordSource::fields() const {
    return impl_->fields;
}
std::uint64_t TfRecordSource::num_samples() const {
    return impl_->num_records;
}
std::uint64_t TfRecordSource::skipped_records() const noexcept {
    return impl_->skipped;
}
std::uint64_t TfRecordSource::skipped_bytes() const noexcept {
    return impl_->skipped_bytes;
}
std::vector<SourceStatistic> TfRecordSource::statistics() const {
    return {{"skipped_records", impl_->skipped},
            {"skipped_bytes", impl_->skipped_bytes},
            {"resync_rounds", static_cast<std::uint64_t>(impl_->rounds)}};
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

std::uint64_t TfRecordSource::sample_bytes(std::uint64_t id) const {
    return record(id).length;
}

tfrecord::RecordRef TfRecordSource::record(std::uint64_t id) const {
    if (impl_->records == nullptr) {
        throw ConfigError(
            "tfrecord: '" + impl_->paths.front() + "'" +
            (impl_->paths.size() > 1
                 ? " and " + std::to_string(impl_->paths.size() - 1) + " other file(s)"
                 : std::string()) +
            ": record " + std::to_string(id) + " asked of a closed source (after close())");
    }
    if (id >= impl_->num_records) {
        throw ConfigError("tfrecord: record id " + std::to_string(id) +
                          " out of range (N = " + std::to_string(impl_->num_records) + ")");
    }
    return impl_->records[id];
}

std::uint64_t TfRecordSource::records_in_cut(int rank, int world_size) const {
    if (world_size < 1 || rank < 0 || rank >= world_size) return 0;
    const auto& im = *impl_;
    if (im.records == nullptr) throw ConfigError("tfrecord: records_in_cut of a closed source");
    const std::uint64_t total = im.starts.back();
    const std::uint64_t b = tfrecord::cut_begin(total, rank, world_size);
    const std::uint64_t e = tfrecord::cut_begin(total, rank + 1, world_size);
    auto first_at = [&](std::uint64_t x) {
        return std::partition_point(im.records, im.records + im.num_records,
                                    [&](const RecordRef& r) { return im.cut_position(r) < x; });
    };
    return static_cast<std::uint64_t>(first_at(e) - first_at(b));
}

namespace {

/// Largest group of records read into one buffer by `read` (each run in it is one read call).
constexpr std::uint64_t kGroupBytes = std::uint64_t{64} << 20;

/// Checks the framing and payload CRC of record `r` at `rec` and writes it to slot `slot`.
void emit_record(const tfrecord::SourceState& im, const RecordRef& r, const std::uint8_t* rec,
                 BatchSink& sink, std::size_t slot) {
    const auto& f = im.files[r.file];
    const std::uint64_t bytes = r.length + kFramingBytes;
    const std::string name = f.gz ? f.path + " (decompressed)" : f.path;
    std::uint64_t length = 0;
    if (tfrecord::check_header(rec, 0, bytes, length) != tfrecord::HeaderStatus::ok ||
        length != r.length) {
        throw FormatError("tfrecord: " + name + ": record header at offset " +
                          std::to_string(r.offset) + " is not the one the index found (length " +
                          std::to_string(r.length) + "): the file changed since open, or this " +
                          "rank's copy differs from the one of the rank that indexed it");
    }
    if (im.options.verify_payload_crc && masked_crc32c(rec + kHeaderBytes, r.length) !=
                                             detail::load_le32(rec + kHeaderBytes + r.length)) {
        throw FormatError("tfrecord: " + name + ": payload CRC32C mismatch in record at offset " +
                          std::to_string(r.offset) + " (length " + std::to_string(r.length) + ")");
    }
    if (im.decoder) {
        im.decoder->decode(rec + kHeaderBytes, r.length, sink, slot,
                           name + " record at offset " + std::to_string(r.offset));
    } else {
        std::byte* dst = sink.ragged(0, slot, r.length);
        if (r.length > 0) std::memcpy(dst, rec + kHeaderBytes, r.length);
    }
}

/// Reads the plain-file records `refs` into `buf`, sorted by (file, offset) and coalesced into
/// runs of adjacent records (one read call per run, at most max_read_bytes each); `at[j]` is
/// where record j starts in `buf`. Records of gzip files are skipped (they are in memory).
void read_group(const tfrecord::SourceState& im, const std::vector<RecordRef>& refs,
                std::vector<std::uint8_t>& buf, std::vector<std::uint64_t>& at) {
    std::vector<std::size_t> order(refs.size());
    for (std::size_t j = 0; j < order.size(); ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return refs[a].file != refs[b].file ? refs[a].file < refs[b].file
                                            : refs[a].offset < refs[b].offset;
    });
    at.assign(refs.size(), 0);
    std::uint64_t total = 0;
    for (const std::size_t j : order) {
        at[j] = total;
        if (!im.files[refs[j].file].gz) total += refs[j].length + kFramingBytes;
    }
    if (buf.size() < total) buf.resize(static_cast<std::size_t>(total));
    for (std::size_t i = 0; i < order.size();) {
        const RecordRef& first = refs[order[i]];
        std::uint64_t run = first.length + kFramingBytes;
        std::size_t n = 1;
        while (i + n < order.size() && !im.files[first.file].gz) {
            const RecordRef& next = refs[order[i + n]];
            if (next.file != first.file || next.offset != first.offset + run ||
                run + next.length + kFramingBytes > im.options.max_read_bytes) {
                break;
            }
            run += next.length + kFramingBytes;
            ++n;
        }
        if (!im.files[first.file].gz) {
            im.read_at(first.file, first.offset, buf.data() + at[order[i]], run, false);
        }
        i += n;
    }
}

}  // namespace

void TfRecordSource::read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const {
    const auto& im = *impl_;
    const std::shared_lock<std::shared_mutex> reading(im.lifetime);  // close() waits for it
    std::vector<std::uint8_t> buf;
    std::vector<std::uint64_t> at;
    std::vector<RecordRef> refs;
    // Groups of consecutive slots of at most kGroupBytes (or one record), each read sorted and
    // coalesced, then checked and emitted in slot order (ragged slots must come in order).
    for (std::size_t k = 0; k < count;) {
        refs.clear();
        std::uint64_t bytes = 0;
        while (k + refs.size() < count) {
            const RecordRef r = record(ids[k + refs.size()]);
            if (!refs.empty() && bytes + r.length + kFramingBytes > kGroupBytes) break;
            bytes += r.length + kFramingBytes;
            refs.push_back(r);
        }
        read_group(im, refs, buf, at);
        for (std::size_t j = 0; j < refs.size(); ++j) {
            const auto& f = im.files[refs[j].file];
            std::shared_ptr<const std::vector<std::uint8_t>> gz;
            const std::uint8_t* rec = buf.data() + at[j];
            if (f.gz) {
                gz = im.gz(refs[j].file, false);
                if (refs[j].offset + refs[j].length + kFramingBytes > gz->size()) {
                    throw FormatError("tfrecord: " + f.path +
                                      ": decompressed stream shorter than its index (record at "
                                      "offset " +
                                      std::to_string(refs[j].offset) + ")");
                }
                rec = gz->data() + refs[j].offset;
            }
            emit_record(im, refs[j], rec, sink, k + j);
        }
        k += refs.size();
    }
}

void write_dali_index(CommRef ref, const std::vector<std::string>& data_paths,
                      const std::vector<std::string>& index_paths) {
    if (data_paths.size() != index_paths.size()) {
        throw ConfigError("tfrecord index: " + std::to_string(index_paths.size()) +
                          " index paths for " + std::to_string(data_paths.size()) + " files");
    }
    // One communicator for the scan and the writes (a plain MPI_Comm: one duplicate, which
    // the source borrows).
    const detail::CallComm call(ref);
    const Communicator& comm = call.get();
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
                throw IoError("tfrecord index: cannot write " + p + ": " + std::strerror(errno));
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
