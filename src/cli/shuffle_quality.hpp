#pragma once
// The shuffle-quality figure of an epoch (docs/shuffle.md, "How good a shuffle is"): how far the
// order a rank received is from a full shuffle, measured on the ids it yielded.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "mpistage/batch.hpp"
#include "mpistage/comm.hpp"

namespace mpistage::cli {

/// The figure, identical on every rank after `ShuffleQuality::finish`.
struct ShuffleFigure {
    /// Mean distinct blocks per batch, the dataset cut into `blocks` equal blocks of ids, and
    /// what a full shuffle gives in expectation (blocks · (1 − (1 − 1/blocks)^b) for a batch of
    /// b valid samples): the locality a batch kept (1 = one block, as unshuffled).
    std::uint64_t blocks = 0;
    double blocks_per_batch = 0;
    double full_shuffle_blocks_per_batch = 0;
    /// `Shuffle::chunks` only (else 0): the same at the order's own chunks of `chunk_samples`.
    std::uint64_t chunk_samples = 0;
    double chunks_per_batch = 0;
    double full_shuffle_chunks_per_batch = 0;
    /// Mean |id_i − id_{i−1}| / N over consecutive samples of each rank's sequence (a full
    /// shuffle: about 1/3; unshuffled: 1/N).
    double mean_jump = 0;
    /// Batches and pairs measured, over all ranks.
    std::uint64_t batches = 0;
};

/// The figure as the JSON report's `epochs[].shuffle_quality` object (and the Python
/// `Epoch.shuffle_quality` dict): blocks, blocks_per_batch, full_shuffle_blocks_per_batch,
/// mean_jump, full_shuffle_mean_jump, batches; with chunks also chunk_samples,
/// chunks_per_batch, full_shuffle_chunks_per_batch.
nlohmann::json shuffle_figure_json(const ShuffleFigure& f);

/// Accumulates one rank's batches of one epoch. Not thread-safe; O(B log B) per batch.
class ShuffleQuality {
public:
    /// `num_samples` N ≥ 1; `chunk_samples` the chunk order's chunk (0: not chunked).
    ShuffleQuality(std::uint64_t num_samples, std::uint64_t chunk_samples);
    void add(const HostBatch& batch) { add(batch.index(), batch.valid(), batch.size()); }
    /// One batch of `size` slots: its ids (`index`, int64 [size]) where `valid` is non-zero.
    void add(const std::int64_t* index, const std::uint8_t* valid, std::size_t size);
    /// Collective: sums over ranks; the figure of the epoch.
    ShuffleFigure finish(const Communicator& comm) const;

private:
    std::uint64_t n_;
    std::uint64_t blocks_;
    std::uint64_t chunk_;
    std::uint64_t batches_ = 0;
    double blocks_sum_ = 0, blocks_expected_ = 0;
    double chunks_sum_ = 0, chunks_expected_ = 0;
    double jump_sum_ = 0;
    std::uint64_t pairs_ = 0;
    std::int64_t last_ = -1;
    std::vector<std::uint64_t> ids_;
    std::vector<std::uint64_t> scratch_;
};

}  // namespace mpistage::cli
