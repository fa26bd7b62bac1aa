// The consumed-id digest's parts (see consumed_digest.hpp).
#include "plan/consumed_digest.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "mpistage/hash.hpp"
#include "plan/plan_detail.hpp"

namespace mpistage::detail {

namespace {

/// Tags the digest's seed and keys apart from every other use of the hashes ("consumed").
constexpr std::uint64_t kTagConsumed = 0x636f6e73756d6564ull;

}  // namespace

std::uint64_t consumed_digest_seed(std::uint64_t epoch) noexcept {
    return mix64(mix64(epoch ^ kTagConsumed) + 1);
}

std::uint64_t consumed_term(std::uint64_t id, std::uint64_t epoch) noexcept {
    std::uint8_t bytes[8];
    for (int b = 0; b < 8; ++b) bytes[b] = static_cast<std::uint8_t>(id >> (8 * b));
    return XXH3_64bits_withSeed(bytes, sizeof bytes, mix64(epoch ^ kTagConsumed));
}

std::uint64_t plan_steps_digest(const EpochPlan& plan, std::uint64_t from, std::uint64_t to,
                                std::uint64_t epoch) {
    std::uint64_t sum = 0;
    const std::uint64_t end = plan.batch_begin(to);
    for (std::uint64_t k = plan.batch_begin(from); k < end; ++k) {
        // On-demand slots: one evaluation of the rule gives both the id and its validity.
        const auto [id, valid] =
            plan.rule ? plan.rule->at(k)
                      : std::pair<std::int64_t, bool>{plan.ids[k], plan.valid[k] != 0};
        if (valid) sum += consumed_term(static_cast<std::uint64_t>(id), epoch);
    }
    return sum;
}

std::uint64_t id_range_digest(std::uint64_t begin, std::uint64_t end, std::uint64_t epoch) {
    std::uint64_t sum = 0;
    for (std::uint64_t id = begin; id < end; ++id) sum += consumed_term(id, epoch);
    return sum;
}

std::uint64_t global_positions_digest(std::uint64_t num_samples, const PlanOptions& options,
                                      std::uint64_t epoch, std::uint64_t begin, std::uint64_t end,
                                      int order_world_size) {
    // The global plan's own slot rule at one rank with batches of one sample: slot k is
    // epoch position k, so the ids are the ones every plan of this epoch yields there.
    SlotRule rule;
    rule.kind = SlotRule::Kind::global;
    rule.num_samples = num_samples;
    rule.batch_size = 1;
    rule.shuffle = options.shuffle == Shuffle::global;
    rule.mask = true;
    rule.perm = Permutation(num_samples, epoch_permutation_key(options, epoch, 0));
    rule.width = 1;
    if (options.shuffle == Shuffle::chunks) {
        rule.chunks = std::make_shared<const ChunkOrder>(
            chunk_order(num_samples, options, epoch, static_cast<std::uint64_t>(order_world_size)));
    }
    std::uint64_t sum = 0;
    for (std::uint64_t p = begin; p < end && p < num_samples; ++p) {
        sum += consumed_term(static_cast<std::uint64_t>(rule.at(p).first), epoch);
    }
    return sum;
}

std::pair<std::uint64_t, std::uint64_t> part_range(std::uint64_t total, std::uint64_t part,
                                                   std::uint64_t parts) {
    // The first total mod parts parts hold one more (as balanced_shard_begins cuts shards).
    const auto cut = [&](std::uint64_t q) {
        return q * (total / parts) + std::min(q, total % parts);
    };
    return {cut(part), cut(part + 1)};
}

std::string digest_to_hex(std::uint64_t digest) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, digest);
    return buf;
}

bool digest_from_hex(const std::string& text, std::uint64_t& digest) noexcept {
    if (text.size() != 16) return false;
    std::uint64_t v = 0;
    for (const char c : text) {
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        if (d < 0) return false;
        v = v << 4 | static_cast<std::uint64_t>(d);
    }
    digest = v;
    return true;
}

}  // namespace mpistage::detail
