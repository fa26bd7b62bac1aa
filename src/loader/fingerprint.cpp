// Dataset fingerprints: metadata, spread samples and sizes (`sampled`), every byte (`full`).
#include "loader/fingerprint.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "comm/agree.hpp"
#include "loader/contents.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"

namespace mpistage::detail {

namespace {

/// Samples read per call while hashing a shard (bounds the memory of `full`).
constexpr std::uint64_t kReadChunk = 64;
/// Key tags, so the three sums of a sample id never share a term.
constexpr std::uint64_t kTagSampled = 0x53414d504c454421ull;
constexpr std::uint64_t kTagSize = 0x53495a4553495a45ull;
constexpr std::uint64_t kTagFull = 0x46554c4c46554c4cull;

std::string hex64(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return buf;
}

/// N, the skipped-record count and the fields (name, dtype, shape, ragged).
std::string metadata(const Source& source, std::uint64_t num_samples,
                     std::uint64_t skipped_records) {
    std::string s = "N=" + std::to_string(num_samples) + ";skipped=" +
                    std::to_string(skipped_records);
    for (const FieldInfo& f : source.fields()) {
        s += ";" + f.name + ":" + dtype_name(f.dtype) + (f.ragged ? ":ragged:[" : ":[");
        for (const auto d : f.sample_shape) s += std::to_string(d) + ",";
        s += "]";
    }
    return s;
}

/// The term of sample `id` in a keyed sum: XXH3 of `value` seeded by the id and the tag.
std::uint64_t term(std::uint64_t value, std::uint64_t id, std::uint64_t tag) {
    std::uint8_t bytes[8];
    for (int b = 0; b < 8; ++b) bytes[b] = static_cast<std::uint8_t>(value >> (8 * b));
    return XXH3_64bits_withSeed(bytes, sizeof bytes, id ^ tag);
}

/// This rank's three sums over its shard [begin, end).
std::vector<std::uint64_t> shard_sums(const Source& source, std::uint64_t num_samples,
                                      std::uint64_t begin, std::uint64_t end, bool full) {
    std::uint64_t sampled = 0;
    std::uint64_t sizes = 0;
    std::uint64_t contents = 0;
    std::vector<std::uint64_t> wanted;
    for (const std::uint64_t p : fingerprint_positions(num_samples)) {
        if (p >= begin && p < end) wanted.push_back(p);
    }
    for (std::size_t k = 0; k < wanted.size(); k += kReadChunk) {
        const std::vector<std::uint64_t> ids(
            wanted.begin() + static_cast<std::ptrdiff_t>(k),
            wanted.begin() + static_cast<std::ptrdiff_t>(std::min(wanted.size(), k + kReadChunk)));
        const auto hashes = sample_xxh3(source, ids);
        for (std::size_t j = 0; j < ids.size(); ++j) sampled += term(hashes[j], ids[j], kTagSampled);
    }
    std::vector<std::uint64_t> ids;
    for (std::uint64_t at = begin; at < end; at += kReadChunk) {
        ids.resize(std::min(kReadChunk, end - at));
        for (std::size_t j = 0; j < ids.size(); ++j) {
            ids[j] = at + j;
            sizes += term(source.sample_bytes(ids[j]), ids[j], kTagSize);
        }
        if (!full) continue;
        const auto hashes = sample_xxh3(source, ids);
        for (std::size_t j = 0; j < ids.size(); ++j) contents += term(hashes[j], ids[j], kTagFull);
    }
    return {sampled, sizes, contents};
}

}  // namespace

std::vector<std::uint64_t> fingerprint_positions(std::uint64_t num_samples) {
    std::vector<std::uint64_t> out;
    if (num_samples == 0) return out;
    const std::uint64_t strata = std::min(num_samples, kFingerprintStrata);
    out.reserve(strata + 2);
    out.push_back(0);
    for (std::uint64_t i = 0; i < strata; ++i) {
        // [lo, hi) without overflow: i·N/strata computed as quotient and remainder.
        const auto at = [&](std::uint64_t k) {
            const std::uint64_t q = num_samples / strata;
            const std::uint64_t r = num_samples % strata;
            return k * q + (k * r) / strata;
        };
        const std::uint64_t lo = at(i);
        const std::uint64_t hi = at(i + 1);
        out.push_back(lo + mix64(num_samples ^ mix64(i + 1)) % (hi - lo));
    }
    out.push_back(num_samples - 1);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::string dataset_fingerprint(const Communicator& comm, const Source& source,
                                std::uint64_t num_samples, std::uint64_t skipped_records,
                                FingerprintLevel level) {
    std::string meta = metadata(source, num_samples, skipped_records);
    if (level == FingerprintLevel::ends) {
        // Format versions 1 and 2: FNV-1a 64 of the metadata and the FNV-1a 64 of samples
        // 0, N/2 and N−1, read by every rank.
        std::vector<std::uint64_t> hashes;
        run_agreed(comm, [&] {
            hashes = sample_hashes(source, {0, num_samples / 2, num_samples - 1});
        });
        for (const std::uint64_t h : hashes) meta += ";" + hex64(h);
        return hex64(fnv1a64(meta));
    }
    const auto begins = balanced_shard_begins(num_samples, comm.size());
    const auto r = static_cast<std::size_t>(comm.rank());
    std::vector<std::uint64_t> mine;
    run_agreed(comm, [&] {
        mine = shard_sums(source, num_samples, begins[r], begins[r + 1],
                          level == FingerprintLevel::full);
    });
    const std::vector<std::uint64_t> all = comm.allgather(mine);
    std::uint64_t sums[3] = {0, 0, 0};
    for (std::size_t k = 0; k < all.size(); ++k) sums[k % 3] += all[k];
    meta += ";level=" + to_string(level) + ";sampled=" + hex64(sums[0]) + ";sizes=" +
            hex64(sums[1]);
    if (level == FingerprintLevel::full) meta += ";contents=" + hex64(sums[2]);
    return hex64(XXH3_64bits(meta.data(), meta.size()));
}

}  // namespace mpistage::detail
