#include "mpistage/raw_source.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <shared_mutex>

#include "comm/agree.hpp"
#include "comm/call_comm.hpp"
#include "sources/file_rows.hpp"
#include "util/byte_order.hpp"
#include "util/descriptor_limit.hpp"
#include "util/file_identity.hpp"
#include "util/posix_file.hpp"

namespace mpistage {

DType idx_dtype(unsigned code, const std::string& where) {
    switch (code) {
    case 0x08: return DType::uint8;
    case 0x09: return DType::int8;
    case 0x0B: return DType::int16;
    case 0x0C: return DType::int32;
    case 0x0D: return DType::float32;
    case 0x0E: return DType::float64;
    default: break;
    }
    throw FormatError(where + ": unknown IDX element type code " + std::to_string(code) +
                      " at offset 2");
}

RawField parse_idx_header(const std::string& path, const std::string& field_name) {
    detail::PosixFile file(path);
    const std::string ctx = "idx: " + path;
    std::array<unsigned char, 4> magic{};
    if (file.size_bytes() < 4) throw FormatError(ctx + ": file of " + std::to_string(file.size_bytes()) + " bytes is too short for an IDX header (offset 0)");
    file.read_exact(reinterpret_cast<std::byte*>(magic.data()), 4, 0, ctx);
    if (magic[0] == 0x1f && magic[1] == 0x8b) {
        throw FormatError(ctx + ": gzip-compressed (magic 1f 8b at offset 0); decompress it first "
                                "or use `mpistage convert idx`");
    }
    if (magic[0] != 0 || magic[1] != 0) {
        throw FormatError(ctx + ": not an IDX file (magic bytes at offset 0 are not 00 00)");
    }
    RawField f;
    f.name = field_name;
    f.path = path;
    f.big_endian = true;
    f.dtype = idx_dtype(magic[2], ctx);
    const unsigned ndims = magic[3];
    if (ndims == 0) throw FormatError(ctx + ": IDX header declares 0 dimensions (offset 3)");
    std::vector<unsigned char> dims(4u * ndims);
    file.read_exact(reinterpret_cast<std::byte*>(dims.data()), dims.size(), 4, ctx + " header");
    f.num_records = detail::load_be32(dims.data());
    for (unsigned d = 1; d < ndims; ++d) f.sample_shape.push_back(detail::load_be32(dims.data() + 4 * d));
    f.header_bytes = 4 + 4ull * ndims;
    const std::uint64_t need =
        f.header_bytes + checked_mul(f.num_records,
                                     checked_sample_bytes(f.sample_shape, f.dtype, ctx),
                                     ctx + ": records");
    if (file.size_bytes() != need) {
        throw FormatError(ctx + ": header declares " + std::to_string(f.num_records) +
                          " records (" + std::to_string(need) + " bytes) but the file has " +
                          std::to_string(file.size_bytes()) + " bytes");
    }
    return f;
}

struct RawSource::Impl {
    std::vector<RawField> raw;
    std::vector<detail::PosixFile> files;
    std::vector<std::string> identities;  ///< detail::file_identity of each file at open
    std::vector<FieldInfo> infos;
    std::uint64_t num_samples = 0;
    std::uint64_t record_bytes = 0;
    /// Held shared by every use of `files`, exclusively by close(): a read in another thread
    /// never sees a descriptor closed under it.
    mutable std::shared_mutex files_mutex;
    bool closed = false;  ///< after close(): every read throws (check_open)

    /// @throws ConfigError after `close()`: a read of a closed source, naming its files.
    void check_open(const char* what) const {
        if (!closed) return;
        std::string names;
        for (const RawField& f : raw) names += (names.empty() ? "'" : ", '") + f.path + "'";
        throw ConfigError("raw: " + names + ": " + what + " of a closed source (after close())");
    }
};

RawSource::RawSource(CommRef ref, std::vector<RawField> fields) : impl_(std::make_unique<Impl>()) {
    // Needed only during the call: the caller's Communicator, or a duplicate of a plain
    // MPI_Comm freed on return (the source's one MPI_Comm_dup).
    const detail::CallComm call(ref);
    const Communicator& comm = call.get();
    run_agreed(comm, [&] {
        if (fields.empty()) throw ConfigError("raw: no fields given");
        detail::require_descriptors(
            fields.size(),
            "'" + fields[0].path + "'" +
                (fields.size() > 1 ? " and " + std::to_string(fields.size() - 1) + " other file(s)"
                                   : std::string()),
            "raw");
        for (auto& f : fields) {
            detail::PosixFile file(f.path);
            FieldInfo info;
            info.name = f.name;
            info.dtype = f.dtype;
            info.sample_shape = f.sample_shape;
            info.sample_bytes =
                checked_sample_bytes(f.sample_shape, f.dtype, "raw: " + f.path + ": field '" + f.name + "'");
            if (info.sample_bytes == 0) {
                throw ConfigError("raw: " + f.path + ": field '" + f.name + "' has 0-byte records");
            }
            if (file.size_bytes() < f.header_bytes) {
                throw FormatError("raw: " + f.path + ": file of " +
                                  std::to_string(file.size_bytes()) +
                                  " bytes is shorter than its header (" +
                                  std::to_string(f.header_bytes) + " bytes)");
            }
            const std::uint64_t body = file.size_bytes() - f.header_bytes;
            if (f.num_records == 0) {
                if (body % info.sample_bytes != 0) {
                    throw FormatError("raw: " + f.path + ": " + std::to_string(body) +
                                      " bytes after the header are not a whole number of " +
                                      std::to_string(info.sample_bytes) + "-byte records");
                }
                f.num_records = body / info.sample_bytes;
            } else if (checked_mul(f.num_records, info.sample_bytes, "raw: " + f.path) > body) {
                throw IoError("raw: " + f.path + ": truncated: " + std::to_string(f.num_records) +
                              " records need " + std::to_string(f.num_records * info.sample_bytes) +
                              " bytes after offset " + std::to_string(f.header_bytes) +
                              ", the file has " + std::to_string(body));
            }
            impl_->record_bytes += info.sample_bytes;
            impl_->infos.push_back(info);
            impl_->identities.push_back(detail::file_identity(file));
            impl_->files.push_back(std::move(file));
        }
        impl_->num_samples = fields.front().num_records;
        for (const auto& f : fields) {
            if (f.num_records != impl_->num_samples) {
                throw ConfigError("raw: fields differ in record count: '" + fields.front().name +
                                  "' has " + std::to_string(impl_->num_samples) + ", '" + f.name +
                                  "' has " + std::to_string(f.num_records));
            }
        }
        if (impl_->num_samples == 0) throw ConfigError("raw: 0 records: nothing to shard");
        impl_->raw = fields;
    });
}

RawSource::~RawSource() = default;

void RawSource::close() noexcept {
    const std::unique_lock<std::shared_mutex> lock(impl_->files_mutex);
    impl_->files.clear();
    impl_->closed = true;
}

const std::vector<FieldInfo>& RawSource::fields() const { return impl_->infos; }
std::uint64_t RawSource::num_samples() const { return impl_->num_samples; }
std::uint64_t RawSource::records_in_cut(int rank, int world_size) const {
    return fixed_records_in_cut(impl_->num_samples, impl_->record_bytes, rank, world_size);
}

std::string RawSource::fingerprint() const {
    std::string s = "raw;N=" + std::to_string(impl_->num_samples);
    for (std::size_t i = 0; i < impl_->raw.size(); ++i) {
        s += ";" + impl_->raw[i].name + ":" + impl_->raw[i].path + ":" +
             std::to_string(impl_->files[i].size_bytes()) + ":" + dtype_name(impl_->raw[i].dtype);
    }
    return s;
}

namespace {

/// The run of ids starting at position `i` of `order` (sorted by id): consecutive ids whose
/// bytes follow each other in the file, at most `max_bytes` long. Returns its length.
std::size_t run_length(const std::uint64_t* ids, const std::vector<std::size_t>& order,
                       std::size_t i, std::uint64_t rb, std::uint64_t max_bytes) {
    std::size_t n = 1;
    while (i + n < order.size() && ids[order[i + n]] == ids[order[i]] + n &&
           (n + 1) * rb <= max_bytes) {
        ++n;
    }
    return n;
}

}  // namespace

void RawSource::read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const {
    constexpr std::uint64_t kMaxReadBytes = std::uint64_t{1} << 30;
    const std::shared_lock<std::shared_mutex> lock(impl_->files_mutex);
    impl_->check_open("read");
    for (std::size_t k = 0; k < count; ++k) {
        if (ids[k] >= impl_->num_samples) {
            throw ConfigError("raw: sample id " + std::to_string(ids[k]) + " out of range");
        }
    }
    // Sorted by file offset and coalesced into runs of consecutive records: one pread per run,
    // straight into the batch when its slots are contiguous there, through a buffer otherwise.
    std::vector<std::size_t> order(count);
    for (std::size_t k = 0; k < count; ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return ids[a] < ids[b]; });
    thread_local std::vector<std::byte> scratch;
    for (std::size_t fi = 0; fi < impl_->raw.size(); ++fi) {
        const RawField& f = impl_->raw[fi];
        const std::uint64_t rb = impl_->infos[fi].sample_bytes;
        const std::size_t elem = dtype_size(f.dtype);
        for (std::size_t i = 0; i < count;) {
            const std::size_t n = run_length(ids, order, i, rb, std::max(kMaxReadBytes, rb));
            std::byte* first = sink.fixed(fi, order[i]);
            bool contiguous = true;
            for (std::size_t j = 1; j < n && contiguous; ++j) {
                contiguous = sink.fixed(fi, order[i + j]) == first + j * rb;
            }
            if (!contiguous && scratch.size() < n * rb) scratch.resize(n * rb);
            std::byte* dst = contiguous ? first : scratch.data();
            impl_->files[fi].read_exact(dst, n * rb, f.header_bytes + ids[order[i]] * rb,
                                        "raw: field '" + f.name + "' records " +
                                            std::to_string(ids[order[i]]) + ".." +
                                            std::to_string(ids[order[i]] + n - 1));
            if (f.big_endian && elem > 1) {
                for (std::uint64_t e = 0; e < n * rb; e += elem) {
                    std::reverse(dst + e, dst + e + elem);
                }
            }
            for (std::size_t j = 0; j < n && !contiguous; ++j) {
                std::memcpy(sink.fixed(fi, order[i + j]), dst + j * rb, rb);
            }
            i += n;
        }
    }
}

void RawSource::check_unchanged() const {
    const std::shared_lock<std::shared_mutex> lock(impl_->files_mutex);
    impl_->check_open("check_unchanged");
    for (std::size_t i = 0; i < impl_->files.size(); ++i) {
        detail::check_file_unchanged(impl_->files[i], impl_->identities[i], "raw");
    }
}

bool RawSource::file_rows(std::size_t field, detail::FileRows& out) const {
    const std::shared_lock<std::shared_mutex> lock(impl_->files_mutex);
    if (impl_->closed || field >= impl_->raw.size()) return false;
    const RawField& f = impl_->raw[field];
    if (f.big_endian && dtype_size(f.dtype) > 1) return false;
    const detail::PosixFile& file = impl_->files[field];
    out = {file.fd(), file.path(), f.header_bytes, file.size_bytes()};
    return true;
}

}  // namespace mpistage
