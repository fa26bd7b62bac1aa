#pragma once
// The epoch order of `Shuffle::chunks`: a locality-aware shuffle for datasets larger than the
// memory that holds them (docs/shuffle.md).

#include <cstdint>
#include <memory>
#include <vector>

#include "mpistage/plan.hpp"

namespace mpistage::detail {

/// The chunk-window order of one epoch, a bijection of epoch positions [0, N) onto sample ids.
///
/// The algorithm is CorgiPile's two-level shuffle (L. Xu et al., "In-Database Machine Learning
/// with CorgiPile: Stochastic Gradient Descent without Full Data Shuffle", SIGMOD 2022), in
/// its multi-worker form, made a pure function of (seed, epoch, N, world size):
///  1. the ids are cut into chunks of C contiguous samples; the floor(N / C) full chunks are
///     permuted per epoch (a Feistel permutation keyed by seed and epoch) and concatenated, the
///     short tail chunk (N mod C ids) last: the sequence S;
///  2. S is cut into `pieces` contiguous parts (one per rank of the world the epoch started
///     at), part r holding the ceil((N - r) / pieces) positions p ≡ r (mod pieces);
///  3. inside each part, windows of K·C consecutive samples (K chunks, the resident set) are
///     each permuted (keyed by seed, epoch, part and window).
/// Position p is sample `window_r(p div pieces)` of part r = p mod pieces. With global
/// sharding and the strided rank slots of `Shuffle::chunks` (rank r's slot j of a global batch
/// is its position r + j·W), rank r of a W = pieces world reads only its own part: each batch
/// from one or two windows of at most K + 1 chunks, each window once, chunks in a new rank
/// and window every epoch. Resumed at another world size the rest of the epoch keeps this
/// order (exactly once), only less local. Plain value; O(1) per id; thread-safe (const).
/// Up to kChunkTable full chunks, the chunk permutation is tabulated at construction (4 bytes
/// a chunk): its Feistel domain rounds up to an even power of two, so a lookup saves up to
/// 4 cycle-walks of 4 rounds per id (the permutations were 12 % of a rank's CPU under
/// `--shuffle chunks` by `perf`; ids are asked for several times a slot).
class ChunkOrder {
public:
    /// @throws ConfigError for N, pieces, chunk_samples or window_chunks of 0.
    ChunkOrder(std::uint64_t num_samples, std::uint64_t pieces, std::uint64_t chunk_samples,
               std::uint64_t window_chunks, std::uint64_t key);
    /// The sample at epoch position `p` (< N).
    std::uint64_t id_at(std::uint64_t p) const;
    std::uint64_t pieces() const noexcept { return pieces_; }
    std::uint64_t chunk_samples() const noexcept { return chunk_; }

    /// The most full chunks whose permutation is tabulated (1 MiB).
    static constexpr std::uint64_t kChunkTable = std::uint64_t{1} << 18;

private:
    std::uint64_t n_;
    std::uint64_t pieces_;
    std::uint64_t chunk_;
    std::uint64_t window_;  // K·C samples
    std::uint64_t full_chunks_;
    std::uint64_t key_;
    Permutation chunk_perm_;
    std::shared_ptr<const std::vector<std::uint32_t>> chunk_table_;  // chunk_perm_, or null
};

/// The chunk-window order of `epoch` under `options` (shuffle chunks, its chunk_samples and
/// window_chunks resolved, ≥ 1) for a world of `pieces` ranks.
ChunkOrder chunk_order(std::uint64_t num_samples, const PlanOptions& options, std::uint64_t epoch,
                       std::uint64_t pieces);

}  // namespace mpistage::detail
