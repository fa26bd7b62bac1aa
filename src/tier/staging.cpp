#include "tier/staging.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "comm/agree.hpp"
#include "sources/collective_rows.hpp"

namespace mpistage::detail {

namespace {

constexpr std::uint64_t kMaxReadBytes = std::uint64_t{1} << 30;
constexpr std::uint64_t kMaxIdsPerRead = std::uint64_t{1} << 20;
constexpr std::uint64_t kBlockBytes = std::uint64_t{16} << 20;

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) {
    return (x + a - 1) / a * a;
}

/// Writes staged samples: fixed fields at their place in the segment, ragged to the blocks.
class StagingSink final : public BatchSink {
public:
    StagingSink(const std::vector<FieldInfo>& fields, const ShardLayout& layout, std::byte* base,
                RaggedStaging& ragged, std::uint64_t first_slot)
        : fields_(fields), layout_(layout), base_(base), ragged_(ragged), first_(first_slot) {}
    std::byte* fixed(std::size_t field, std::size_t k) override {
        return base_ + layout_.field_offset[field] + (first_ + k) * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t field, std::size_t k, std::uint64_t size_bytes) override {
        return ragged_.append(field, first_ + k, size_bytes);
    }

private:
    const std::vector<FieldInfo>& fields_;
    const ShardLayout& layout_;
    std::byte* base_;
    RaggedStaging& ragged_;
    std::uint64_t first_;
};

/// The source's collective row reads when every rank has them and they run on the same ranks,
/// in the same order, as `comm` (so they can be entered where `comm`'s collectives are);
/// null on every rank otherwise. Collective over `comm`.
const CollectiveRows* collective_rows(const Communicator& comm, const Source& source) {
    const CollectiveRows* rows = source.collective_rows();
    const bool same = rows != nullptr && rows->runs_on(comm);
    return comm.allreduce_min(same ? 1 : 0) == 1 ? rows : nullptr;
}

void read_pieces(const Source& source, const ShardLayout& layout, std::byte* fixed_base,
                 RaggedStaging& ragged) {
    const auto& fields = source.fields();
    std::uint64_t fixed_per_sample = 0;
    for (const auto& f : fields) fixed_per_sample += f.ragged ? 0 : f.sample_bytes;
    const std::uint64_t per_read = std::clamp<std::uint64_t>(
        kMaxReadBytes / std::max<std::uint64_t>(fixed_per_sample, 1), 1, kMaxIdsPerRead);
    std::vector<std::uint64_t> ids;
    for (std::uint64_t done = 0; done < layout.count;) {
        const std::uint64_t n = std::min(per_read, layout.count - done);
        ids.resize(n);
        std::iota(ids.begin(), ids.end(), layout.first + done);
        StagingSink sink(fields, layout, fixed_base, ragged, done);
        source.read(ids.data(), ids.size(), sink);
        done += n;
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

void read_shard(const Communicator& comm, const Source& source, const ShardLayout& layout,
                std::byte* fixed_base, RaggedStaging& ragged) {
    if (const CollectiveRows* rows = collective_rows(comm, source)) {
        for (std::size_t f = 0; f < source.fields().size(); ++f) {
            rows->read_rows_collective(f, layout.first, layout.count,
                                       fixed_base + layout.field_offset[f]);
        }
    } else {
        agree_or_throw(comm, capture([&] { read_pieces(source, layout, fixed_base, ragged); }));
    }
    // A collective read of a file truncated meanwhile returns zeros past its end without an
    // error: what was read is served only if every rank still sees the file it opened.
    agree_or_throw(comm, capture([&] { source.check_unchanged(); }));
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
