#include "loader/contents.hpp"

#include <algorithm>
#include <map>
#include <new>
#include <string>
#include <vector>

#include <xxhash.h>

#include "comm/agree.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"

namespace mpistage::detail {

namespace {

constexpr std::uint64_t kNone = ~0ull;
/// Samples read per call when hashing whole shards.
constexpr std::uint64_t kChunk = 64;

/// Collects the bytes of each read sample, field by field, and hashes them per sample.
class HashSink final : public BatchSink {
public:
    HashSink(const std::vector<FieldInfo>& fields, std::size_t count)
        : fields_(fields), bytes_(count, std::vector<std::string>(fields.size())) {}
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        auto& s = bytes_[slot][field];
        s.assign(fields_[field].sample_bytes, '\0');
        return reinterpret_cast<std::byte*>(s.data());
    }
    std::byte* ragged(std::size_t field, std::size_t slot, std::uint64_t size_bytes) override {
        auto& s = bytes_[slot][field];
        s.assign(size_bytes, '\0');
        return reinterpret_cast<std::byte*>(s.data());
    }
    std::uint64_t hash(std::size_t slot) const {
        std::string all;
        for (const auto& f : bytes_[slot]) all += std::to_string(f.size()) + ':' + f;
        return fnv1a64(all);
    }
    std::uint64_t xxh3(std::size_t slot) const {
        XXH3_state_t* state = XXH3_createState();
        if (state == nullptr) throw std::bad_alloc();
        XXH3_64bits_reset(state);
        for (const auto& f : bytes_[slot]) {
            std::uint8_t size[8];
            for (int b = 0; b < 8; ++b) size[b] = static_cast<std::uint8_t>(f.size() >> (8 * b));
            XXH3_64bits_update(state, size, sizeof size);
            XXH3_64bits_update(state, f.data(), f.size());
        }
        const std::uint64_t h = XXH3_64bits_digest(state);
        XXH3_freeState(state);
        return h;
    }

private:
    const std::vector<FieldInfo>& fields_;
    std::vector<std::vector<std::string>> bytes_;
};

}  // namespace

std::vector<std::uint64_t> sample_hashes(const Source& source,
                                         const std::vector<std::uint64_t>& ids) {
    HashSink sink(source.fields(), ids.size());
    source.read(ids.data(), ids.size(), sink);
    std::vector<std::uint64_t> out(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) out[k] = sink.hash(k);
    return out;
}

std::vector<std::uint64_t> sample_xxh3(const Source& source,
                                       const std::vector<std::uint64_t>& ids) {
    HashSink sink(source.fields(), ids.size());
    source.read(ids.data(), ids.size(), sink);
    std::vector<std::uint64_t> out(ids.size());
    for (std::size_t k = 0; k < ids.size(); ++k) out[k] = sink.xxh3(k);
    return out;
}

namespace {

/// Hash of every sample of [begin, end) in order.
std::uint64_t hash_range(const Source& source, std::uint64_t begin, std::uint64_t end) {
    std::uint64_t h = mix64(begin ^ (end << 1));
    for (std::uint64_t at = begin; at < end; at += kChunk) {
        std::vector<std::uint64_t> ids(std::min(kChunk, end - at));
        for (std::size_t k = 0; k < ids.size(); ++k) ids[k] = at + k;
        for (const std::uint64_t s : sample_hashes(source, ids)) h = mix64(h ^ s);
    }
    return h;
}

/// (id, hash) pairs of the first and last sample of two shards; kNone for empty shards.
std::vector<std::uint64_t> boundary_hashes(const Source& source, std::uint64_t own_begin,
                                           std::uint64_t own_end, std::uint64_t nb_begin,
                                           std::uint64_t nb_end) {
    std::vector<std::uint64_t> ids;
    for (const auto& [b, e] : {std::pair{own_begin, own_end}, std::pair{nb_begin, nb_end}}) {
        ids.push_back(b < e ? b : kNone);
        ids.push_back(b < e ? e - 1 : kNone);
    }
    std::vector<std::uint64_t> wanted;
    for (const auto id : ids) {
        if (id != kNone) wanted.push_back(id);
    }
    const auto hashes = sample_hashes(source, wanted);
    std::vector<std::uint64_t> out;
    std::size_t k = 0;
    for (const auto id : ids) {
        out.push_back(id);
        out.push_back(id == kNone ? 0 : hashes[k++]);
    }
    return out;
}

/// The differing sample ids in `all` (rank-major groups of `per_rank` (id, hash) pairs).
std::string boundary_mismatches(const std::vector<std::uint64_t>& all, std::size_t per_rank) {
    std::map<std::uint64_t, std::pair<int, std::uint64_t>> first;  // id -> (rank, hash)
    std::map<std::uint64_t, std::string> differ;
    for (std::size_t i = 0; i + 1 < all.size(); i += 2) {
        const std::uint64_t id = all[i];
        if (id == kNone) continue;
        const int rank = static_cast<int>(i / per_rank);
        const auto [it, fresh] = first.emplace(id, std::pair{rank, all[i + 1]});
        if (fresh || it->second.second == all[i + 1] || differ.count(id)) continue;
        differ[id] = "sample " + std::to_string(id) + " differs between rank " +
                     std::to_string(it->second.first) + " and rank " + std::to_string(rank);
    }
    std::string out;
    for (const auto& [id, text] : differ) out += (out.empty() ? "" : "; ") + text;
    return out;
}

}  // namespace

void check_same_contents(const Communicator& comm, const Source& source, std::uint64_t num_samples,
                         bool full) {
    const int w = comm.size();
    const auto begins = balanced_shard_begins(num_samples, w);
    const auto r = static_cast<std::size_t>(comm.rank());
    const auto nb = (r + 1) % static_cast<std::size_t>(w);
    std::vector<std::uint64_t> mine;
    run_agreed(comm, [&] {
        mine = boundary_hashes(source, begins[r], begins[r + 1], begins[nb], begins[nb + 1]);
        if (full) {
            mine.push_back(hash_range(source, begins[r], begins[r + 1]));
            mine.push_back(hash_range(source, begins[nb], begins[nb + 1]));
        }
    });
    const std::size_t per_rank = mine.size();  // equal: `full` is agreed before this call
    const std::size_t extra = full ? 2 : 0;    // the two whole-shard hashes at the end
    const auto all = comm.allgather(mine);
    std::vector<std::uint64_t> pairs;  // the (id, hash) pairs of every rank
    for (int q = 0; q < w; ++q) {
        const auto at =
            all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(q) * per_rank);
        pairs.insert(pairs.end(), at, at + static_cast<std::ptrdiff_t>(per_rank - extra));
    }
    std::string detail = boundary_mismatches(pairs, per_rank - extra);
    for (int q = 0; full && q < w; ++q) {
        const auto next = static_cast<std::size_t>((q + 1) % w);
        const std::uint64_t nb_hash = all[static_cast<std::size_t>(q) * per_rank + per_rank - 1];
        const std::uint64_t own_hash = all[next * per_rank + per_rank - 2];
        if (nb_hash == own_hash) continue;
        detail += (detail.empty() ? "" : "; ") + std::string("samples [") +
                  std::to_string(begins[next]) + ", " + std::to_string(begins[next + 1]) +
                  ") (the shard of rank " + std::to_string(next) + ") differ between rank " +
                  std::to_string(q) + " and rank " + std::to_string(next);
    }
    if (detail.empty()) return;
    throw ConfigError(
        "loader: the dataset's contents differ across ranks (the same path names "
        "different files?): " +
        detail + "; every rank must read identical files (compare checksums of the copies)");
}

}  // namespace mpistage::detail
