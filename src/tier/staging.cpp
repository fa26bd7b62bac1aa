#include "tier/staging.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include "comm/agree.hpp"
#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "sources/collective_rows.hpp"
#include "sources/file_rows.hpp"

namespace mpistage::detail {

namespace {

/// Fixed-field bytes of one piece of the independent staging read (a buffer that stays in
/// the cache; sources split larger reads themselves at 1 GiB).
constexpr std::uint64_t kBounceBytes = std::uint64_t{4} << 20;
constexpr std::uint64_t kMaxIdsPerRead = std::uint64_t{1} << 20;
constexpr std::uint64_t kBlockBytes = std::uint64_t{16} << 20;

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) {
    return (x + a - 1) / a * a;
}

/// Receives one piece of the staging read: fixed fields into a small private buffer that stays
/// in cache (field after field, `count` samples each), ragged fields to the private blocks.
class BounceSink final : public BatchSink {
public:
    BounceSink(const std::vector<FieldInfo>& fields, std::uint64_t count, RaggedStaging& ragged)
        : fields_(fields), block_(fields.size(), 0), ragged_(ragged) {
        std::uint64_t off = 0;
        for (std::size_t f = 0; f < fields.size(); ++f) {
            block_[f] = off;
            if (!fields[f].ragged) off = align_up(off + count * fields[f].sample_bytes, 64);
        }
        buffer_.resize(off);
    }
    void start(std::uint64_t first_slot) { first_ = first_slot; }
    std::byte* fixed(std::size_t field, std::size_t k) override {
        return buffer_.data() + block_[field] + k * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t field, std::size_t k, std::uint64_t size_bytes) override {
        return ragged_.append(field, first_ + k, size_bytes);
    }
    /// Copies the fixed fields of the piece's `n` samples to their place in the segment.
    void copy_out(const ShardLayout& layout, std::byte* base, std::uint64_t n) const {
        for (std::size_t f = 0; f < fields_.size(); ++f) {
            if (fields_[f].ragged || n == 0) continue;
            const std::uint64_t sb = fields_[f].sample_bytes;
            std::memcpy(base + layout.field_offset[f] + first_ * sb, buffer_.data() + block_[f],
                        n * sb);
        }
    }

private:
    const std::vector<FieldInfo>& fields_;
    std::vector<std::uint64_t> block_;
    std::vector<std::byte> buffer_;
    RaggedStaging& ragged_;
    std::uint64_t first_ = 0;
};

/// The source's collective row reads, when the staging read should use them: every rank has
/// them, they run on the same ranks, in the same order, as `comm` (so they can be entered
/// where `comm`'s collectives are), and the source cannot read the rows itself without MPI
/// (`reads_use_mpi`: a chunked or compressed HDF5 dataset). Where the byte layout is known
/// (contiguous datasets: the pread fast path) independent preads of each rank's contiguous
/// range are faster (benchmarks/README.md, "Staging read"). Null on every rank otherwise.
/// Collective over `comm`.
const CollectiveRows* collective_rows(const Communicator& comm, const Source& source) {
    const CollectiveRows* rows = source.collective_rows();
    const bool same = rows != nullptr && rows->runs_on(comm) && source.reads_use_mpi();
    return comm.allreduce_min(same ? 1 : 0) == 1 ? rows : nullptr;
}

/// The independent staging read: pieces of consecutive ids (the sources coalesce each into one
/// large read per field: a pread of the rank's contiguous range where the layout is known)
/// through a bounce buffer of about kBounceBytes, copied into the segment by this process.
/// Measured on the benchmark machine (benchmarks/README.md, "Staging read"): a page of the
/// shared window written by the kernel (a pread straight into it) costs a further ~9 us at
/// its first load from user space, about as much as the read itself, and that cost then lands
/// in the first epochs; the same bytes copied from a buffer that stays in cache cost no more
/// to read, and nothing later.
void read_pieces(const Source& source, const ShardLayout& layout, std::byte* fixed_base,
                 RaggedStaging& ragged) {
    const auto& fields = source.fields();
    std::uint64_t fixed_per_sample = 0;
    for (const auto& f : fields) fixed_per_sample += f.ragged ? 0 : f.sample_bytes;
    const std::uint64_t per_read = std::clamp<std::uint64_t>(
        kBounceBytes / std::max<std::uint64_t>(fixed_per_sample, 1), 1, kMaxIdsPerRead);
    BounceSink sink(fields, std::min(per_read, layout.count), ragged);
    std::vector<std::uint64_t> ids;
    for (std::uint64_t done = 0; done < layout.count;) {
        const std::uint64_t n = std::min(per_read, layout.count - done);
        ids.resize(n);
        std::iota(ids.begin(), ids.end(), layout.first + done);
        sink.start(done);
        source.read(ids.data(), ids.size(), sink);
        sink.copy_out(layout, fixed_base, n);
        done += n;
    }
}

/// What a file is to the kernel (size, modification and status-change times), taken before the
/// staging read and compared after it: a write of the same size anywhere in the file moves
/// the times, where the source's own check (size, first and last 64 KiB) sees nothing. The
/// same identity the mapped staging checks (MappedRows::check_file).
struct FileStamp {
    int fd = -1;
    std::string path;
    struct stat st {};
};

std::string stamp_text(const struct stat& st) {
    return std::to_string(st.st_size) + " bytes, modified " + std::to_string(st.st_mtim.tv_sec) +
           "." + std::to_string(st.st_mtim.tv_nsec) + ", changed " +
           std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
}

/// Local: the stamps of the files the source's fixed fields lie in (none for sources that
/// cannot say, e.g. TFRecord, whose records carry their own CRCs).
std::vector<FileStamp> stamp_files(const Source& source) {
    std::vector<FileStamp> stamps;
    for (std::size_t f = 0; f < source.fields().size(); ++f) {
        FileRows where;
        if (!source.file_rows(f, where) || where.fd < 0) continue;
        const bool seen = std::any_of(stamps.begin(), stamps.end(),
                                      [&](const FileStamp& s) { return s.fd == where.fd; });
        if (seen) continue;
        FileStamp s;
        s.fd = where.fd;
        s.path = where.path;
        if (::fstat(s.fd, &s.st) != 0) {
            throw IoError("tier: " + s.path + ": fstat failed: " + std::strerror(errno));
        }
        stamps.push_back(std::move(s));
    }
    return stamps;
}

/// Local: throws when a file stamped before the read was written meanwhile.
void check_stamps(const std::vector<FileStamp>& before) {
    const auto same = [](const timespec& a, const timespec& b) {
        return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
    };
    for (const FileStamp& s : before) {
        struct stat now {};
        if (::fstat(s.fd, &now) != 0) {
            throw IoError("tier: " + s.path + ": fstat failed: " + std::strerror(errno));
        }
        if (now.st_size != s.st.st_size || !same(now.st_mtim, s.st.st_mtim) ||
            !same(now.st_ctim, s.st.st_ctim)) {
            throw IoError("tier: " + s.path + " changed while it was staged (before the read: " +
                          stamp_text(s.st) + "; after: " + stamp_text(now) +
                          "): bytes read from it may mix two versions, nothing is served from "
                          "it");
        }
    }
}

}  // namespace

RaggedStaging::RaggedStaging(const std::vector<FieldInfo>& infos, std::uint64_t count)
    : fields(infos.size()) {
    for (std::size_t f = 0; f < infos.size(); ++f) {
        if (infos[f].ragged) fields[f].lengths.assign(count, 0);
    }
}

std::byte* RaggedStaging::append(std::size_t field, std::uint64_t slot, std::uint64_t size_bytes) {
    Field& f = fields.at(field);
    if (slot >= f.lengths.size()) {
        throw ConfigError("tier: ragged value for slot " + std::to_string(slot) +
                          " of a non-ragged field or beyond the shard");
    }
    if (f.blocks.empty() || f.blocks.back().capacity() - f.blocks.back().size() < size_bytes) {
        f.blocks.emplace_back();
        f.blocks.back().reserve(std::max(kBlockBytes, size_bytes));
    }
    auto& block = f.blocks.back();
    const std::size_t at = block.size();
    block.resize(at + size_bytes);  // within capacity: earlier pointers stay valid
    f.lengths[slot] += size_bytes;
    f.total_bytes += size_bytes;
    return block.data() + at;
}

std::vector<ShardLayout> fixed_layouts(const std::vector<FieldInfo>& fields,
                                       const std::vector<std::uint64_t>& begins) {
    std::vector<ShardLayout> out(begins.size() - 1);
    for (std::size_t r = 0; r + 1 < begins.size(); ++r) {
        ShardLayout& l = out[r];
        l.first = begins[r];
        l.count = begins[r + 1] - begins[r];
        l.field_offset.assign(fields.size(), 0);
        l.values_offset.assign(fields.size(), 0);
        std::uint64_t off = 0;
        for (std::size_t f = 0; f < fields.size(); ++f) {
            if (fields[f].ragged) continue;
            l.field_offset[f] = off;
            off = align_up(off + checked_mul(l.count, fields[f].sample_bytes, "tier: shard"), 64);
        }
        l.fixed_bytes = off;
    }
    return out;
}

std::string read_shard(const Communicator& comm, const Source& source, const ShardLayout& layout,
                       std::byte* fixed_base, RaggedStaging& ragged) {
    const CollectiveRows* rows = collective_rows(comm, source);
    std::vector<FileStamp> stamps;
    agree_or_throw(comm, capture([&] { stamps = stamp_files(source); }));
    if (rows != nullptr) {
        for (std::size_t f = 0; f < source.fields().size(); ++f) {
            rows->read_rows_collective(f, layout.first, layout.count,
                                       fixed_base + layout.field_offset[f]);
        }
    } else {
        agree_or_throw(comm, capture([&] { read_pieces(source, layout, fixed_base, ragged); }));
    }
    // A collective read of a file truncated meanwhile returns zeros past its end without an
    // error: what was read is served only if every rank still sees the file it opened.
    // A write of the same size (other bytes, anywhere) moves the file's times.
    agree_or_throw(comm, capture([&] {
                       source.check_unchanged();
                       check_stamps(stamps);
                   }));
    return rows != nullptr ? "collective" : "independent";
}

void copy_ragged(const std::vector<FieldInfo>& fields, const ShardLayout& layout,
                 RaggedStaging& ragged, std::byte* base) {
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (!fields[f].ragged) continue;
        RaggedStaging::Field& rf = ragged.fields[f];
        std::uint64_t running = 0;
        auto* offsets = reinterpret_cast<std::uint64_t*>(base + layout.field_offset[f]);
        for (std::uint64_t i = 0; i < layout.count; ++i) {
            offsets[i] = running;
            running += rf.lengths[i];
        }
        offsets[layout.count] = running;
        std::byte* out = base + layout.values_offset[f];
        for (auto& block : rf.blocks) {
            if (!block.empty()) std::memcpy(out, block.data(), block.size());
            out += block.size();
            std::vector<std::byte>().swap(block);  // give the memory back as we go
        }
        rf.blocks.clear();
        std::vector<std::uint64_t>().swap(rf.lengths);
    }
}

}  // namespace mpistage::detail
