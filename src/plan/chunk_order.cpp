// The chunk-window order of Shuffle::chunks (see chunk_order.hpp).
#include "plan/chunk_order.hpp"

#include <algorithm>
#include <string>

#include "mpistage/error.hpp"
#include "mpistage/hash.hpp"

namespace mpistage::detail {

namespace {

std::uint64_t positive(std::uint64_t v, const char* what) {
    if (v == 0) throw ConfigError(std::string("plan: shuffle 'chunks' needs ") + what + " ≥ 1");
    return v;
}

}  // namespace

ChunkOrder::ChunkOrder(std::uint64_t num_samples, std::uint64_t pieces, std::uint64_t chunk_samples,
                       std::uint64_t window_chunks, std::uint64_t key)
    : n_(positive(num_samples, "a dataset of")),
      pieces_(positive(pieces, "a world size")),
      chunk_(positive(chunk_samples, "chunk_samples")),
      window_(chunk_samples * positive(window_chunks, "window_chunks")),
      full_chunks_(num_samples / chunk_samples),
      key_(mix64(key ^ 0x6368756e6b73ULL)),  // "chunks": windows never share the chunk key
      chunk_perm_(std::max<std::uint64_t>(full_chunks_, 1), key) {
    if (window_ / window_chunks != chunk_samples) {
        throw ConfigError("plan: chunk_samples × window_chunks overflows 64 bits");
    }
    if (full_chunks_ > 1 && full_chunks_ <= kChunkTable) {
        auto table = std::make_shared<std::vector<std::uint32_t>>(full_chunks_);
        for (std::uint64_t c = 0; c < full_chunks_; ++c) {
            (*table)[c] = static_cast<std::uint32_t>(chunk_perm_(c));
        }
        chunk_table_ = std::move(table);
    }
}

std::uint64_t ChunkOrder::id_at(std::uint64_t p) const {
    // Part r holds the positions ≡ r (mod pieces); n = a·pieces + b puts one more in the first b.
    const std::uint64_t r = p % pieces_;
    const std::uint64_t u = p / pieces_;
    const std::uint64_t a = n_ / pieces_;
    const std::uint64_t b = n_ % pieces_;
    const std::uint64_t length = a + (r < b ? 1 : 0);
    const std::uint64_t begin = r * a + std::min(r, b);
    // The window of u in part r, permuted on its own.
    const std::uint64_t w = u / window_;
    const std::uint64_t first = w * window_;
    const std::uint64_t size = std::min(window_, length - first);
    const Permutation within(size, mix64(key_ + mix64(r + 1) + mix64(~w)));
    const std::uint64_t q = begin + first + within(u - first);
    // Position q of S: a full chunk's sample, or the tail chunk (identity, last in S).
    if (q >= full_chunks_ * chunk_) return q;
    const std::uint64_t c = q / chunk_;
    return (chunk_table_ ? (*chunk_table_)[c] : chunk_perm_(c)) * chunk_ + q % chunk_;
}

ChunkOrder chunk_order(std::uint64_t num_samples, const PlanOptions& options, std::uint64_t epoch,
                       std::uint64_t pieces) {
    return ChunkOrder(num_samples, pieces, options.chunk_samples, options.window_chunks,
                      epoch_permutation_key(options, epoch, 0));
}

}  // namespace mpistage::detail
