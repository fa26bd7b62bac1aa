// Dataset fingerprints: metadata and a bounded sample of rows with their sizes (`sampled`), every
// size and every byte (`full`), and the levels of older state versions (`ends`, `sampled_v4`).
#include "loader/fingerprint.hpp"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>

#include "comm/agree.hpp"
#include "loader/contents.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"

namespace mpistage::detail {

namespace {

/// Samples read (or sized) between two looks at the clock while sweeping a shard; bounds the
/// memory of `full`.
constexpr std::uint64_t kReadChunk = 64;
/// Key tags, so the sums of a sample id never share a term.
constexpr std::uint64_t kTagSampled = 0x53414d504c454421ull;
constexpr std::uint64_t kTagSize = 0x53495a4553495a45ull;
constexpr std::uint64_t kTagFull = 0x46554c4c46554c4cull;
/// Longest local work between two agreements of a sweep (less with a short timeout, so a rank
/// that finished its shard never waits on the others for longer than a quarter of it).
constexpr std::chrono::milliseconds kSweepSlice{1000};
/// Rank 0 reports a sweep's progress on stderr this often, from the first such interval on
/// (a sweep shorter than this prints nothing).
constexpr std::chrono::seconds kProgressEvery{10};

std::string hex64(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return buf;
}

/// N, the skipped-record count and the fields (name, dtype, shape, ragged).
std::string metadata(const Source& source, std::uint64_t num_samples,
                     std::uint64_t skipped_records) {
    std::string s =
        "N=" + std::to_string(num_samples) + ";skipped=" + std::to_string(skipped_records);
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

/// This rank's sums over the `fingerprint_positions` inside its shard [begin, end): the
/// content terms and the size terms of those samples only. At most kFingerprintStrata + 2
/// reads and size look-ups whatever N is.
struct PositionSums {
    std::uint64_t contents = 0;
    std::uint64_t sizes = 0;
};
PositionSums position_sums(const Source& source, std::uint64_t num_samples, std::uint64_t begin,
                           std::uint64_t end) {
    PositionSums out;
    std::vector<std::uint64_t> wanted;
    for (const std::uint64_t p : fingerprint_positions(num_samples)) {
        if (p >= begin && p < end) wanted.push_back(p);
    }
    for (std::size_t k = 0; k < wanted.size(); k += kReadChunk) {
        const std::vector<std::uint64_t> ids(
            wanted.begin() + static_cast<std::ptrdiff_t>(k),
            wanted.begin() + static_cast<std::ptrdiff_t>(std::min(wanted.size(), k + kReadChunk)));
        const auto hashes = sample_xxh3(source, ids);
        for (std::size_t j = 0; j < ids.size(); ++j) {
            out.contents += term(hashes[j], ids[j], kTagSampled);
            out.sizes += term(source.sample_bytes(ids[j]), ids[j], kTagSize);
        }
    }
    return out;
}

/// Collective over `comm`: the size terms (and, with `contents`, the content terms) of every
/// sample of this rank's shard [begin, end), O(end − begin). The sweep runs in slices of at
/// most kSweepSlice (a quarter of the timeout when that is shorter), each closed by one
/// agreement, so a read error on one rank is thrown on every rank, a rank that stops is named
/// by the watchdog within the timeout however long the sweep takes, and every rank makes the
/// same number of agreements (the loop ends when every rank has swept its shard). Rank 0
/// prints its progress on stderr every kProgressEvery. `what` names the sweep in that line.
struct SweepSums {
    std::uint64_t sizes = 0;
    std::uint64_t contents = 0;
};
SweepSums sweep_shard(const Communicator& comm, const Source& source, std::uint64_t begin,
                      std::uint64_t end, bool contents, const std::string& what) {
    using Clock = std::chrono::steady_clock;
    const std::chrono::milliseconds timeout = comm.timeout();
    const Clock::duration slice =
        timeout.count() > 0 ? std::min<Clock::duration>(kSweepSlice, timeout / 4) : kSweepSlice;
    const Clock::time_point start = Clock::now();
    Clock::time_point next_report = start + kProgressEvery;
    SweepSums out;
    std::uint64_t at = begin;
    std::vector<std::uint64_t> ids;
    for (;;) {
        const LocalStatus status = capture([&] {
            const Clock::time_point until = Clock::now() + slice;
            while (at < end) {
                ids.resize(std::min(kReadChunk, end - at));
                for (std::size_t j = 0; j < ids.size(); ++j) {
                    ids[j] = at + j;
                    out.sizes += term(source.sample_bytes(ids[j]), ids[j], kTagSize);
                }
                if (contents) {
                    const auto hashes = sample_xxh3(source, ids);
                    for (std::size_t j = 0; j < ids.size(); ++j) {
                        out.contents += term(hashes[j], ids[j], kTagFull);
                    }
                }
                at += ids.size();
                if (Clock::now() >= until) break;
            }
        });
        // One agreement per slice: the minimum of "this rank is done" ends the loop on every
        // rank in the same round (a failure is thrown by the agreement on every rank).
        if (agree_min_or_throw(comm, status, at >= end ? 1 : 0) == 1) break;
        const Clock::time_point now = Clock::now();
        if (comm.rank() == 0 && now >= next_report) {
            const std::uint64_t done = at - begin;
            const std::uint64_t total = end - begin;
            std::fprintf(
                stderr,
                "mpistage: %s: rank 0 has swept %" PRIu64 " of the %" PRIu64
                " samples of its shard (%.1f%%) in %.0f s; every rank sweeps its own\n",
                what.c_str(), done, total,
                total == 0 ? 100.0 : 100.0 * static_cast<double>(done) / static_cast<double>(total),
                std::chrono::duration<double>(now - start).count());
            std::fflush(stderr);
            while (next_report <= now) next_report += kProgressEvery;
        }
    }
    return out;
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
    PositionSums positions;
    run_agreed(comm,
               [&] { positions = position_sums(source, num_samples, begins[r], begins[r + 1]); });
    // `sampled_v4` and `full` also sweep every sample of the shard: O(N/W) per rank.
    SweepSums swept;
    if (level != FingerprintLevel::sampled) {
        swept = sweep_shard(comm, source, begins[r], begins[r + 1], level == FingerprintLevel::full,
                            "dataset fingerprint (" + to_string(level) + ")");
    }
    const std::uint64_t sizes = level == FingerprintLevel::sampled ? positions.sizes : swept.sizes;
    const std::vector<std::uint64_t> all =
        comm.allgather(std::vector<std::uint64_t>{positions.contents, sizes, swept.contents});
    std::uint64_t sums[3] = {0, 0, 0};
    for (std::size_t k = 0; k < all.size(); ++k) sums[k % 3] += all[k];
    if (level == FingerprintLevel::sampled) {
        // Format version 5: the sizes of the read samples only (another key than the one of
        // `sampled_v4`, so the two levels never share a value).
        meta += ";level=sampled;sampled=" + hex64(sums[0]) + ";sampled_sizes=" + hex64(sums[1]);
    } else {
        // Versions 3 and 4 (`sampled`, now `sampled_v4`) and `full`: the sizes of every sample.
        meta += std::string(";level=") + (level == FingerprintLevel::full ? "full" : "sampled") +
                ";sampled=" + hex64(sums[0]) + ";sizes=" + hex64(sums[1]);
        if (level == FingerprintLevel::full) meta += ";contents=" + hex64(sums[2]);
    }
    return hex64(XXH3_64bits(meta.data(), meta.size()));
}

}  // namespace mpistage::detail
