#include "cli/shuffle_quality.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace mpistage::cli {

namespace {

/// Blocks of 256 (or N when smaller): coarse enough that a full shuffle's batch meets many.
constexpr std::uint64_t kBlocks = 256;

std::uint64_t distinct(std::vector<std::uint64_t>& keys) {
    std::sort(keys.begin(), keys.end());
    return static_cast<std::uint64_t>(std::unique(keys.begin(), keys.end()) - keys.begin());
}

/// Expected distinct cells among b uniform draws without replacement from m cells of equal size
/// (the with-replacement form, a close upper bound for b ≪ N).
double expected_distinct(double m, double b) {
    return m * (1.0 - std::pow(1.0 - 1.0 / m, b));
}

}  // namespace

ShuffleQuality::ShuffleQuality(std::uint64_t num_samples, std::uint64_t chunk_samples)
    : n_(std::max<std::uint64_t>(1, num_samples)),
      blocks_(std::min(kBlocks, std::max<std::uint64_t>(1, num_samples))),
      chunk_(chunk_samples) {}

nlohmann::json shuffle_figure_json(const ShuffleFigure& f) {
    nlohmann::json j = {{"blocks", f.blocks},
                        {"blocks_per_batch", f.blocks_per_batch},
                        {"full_shuffle_blocks_per_batch", f.full_shuffle_blocks_per_batch},
                        {"mean_jump", f.mean_jump},
                        {"full_shuffle_mean_jump", 1.0 / 3.0},
                        {"batches", f.batches}};
    if (f.chunk_samples > 0) {
        j["chunk_samples"] = f.chunk_samples;
        j["chunks_per_batch"] = f.chunks_per_batch;
        j["full_shuffle_chunks_per_batch"] = f.full_shuffle_chunks_per_batch;
    }
    return j;
}

void ShuffleQuality::add(const std::int64_t* index, const std::uint8_t* valid, std::size_t size) {
    std::vector<std::uint64_t>& ids = ids_;  // reused: no allocation per batch
    ids.clear();
    for (std::size_t j = 0; j < size; ++j) {
        if (!valid[j]) continue;
        const std::int64_t id = index[j];
        ids.push_back(static_cast<std::uint64_t>(id));
        if (last_ >= 0) {
            jump_sum_ += static_cast<double>(std::llabs(id - last_)) / static_cast<double>(n_);
            ++pairs_;
        }
        last_ = id;
    }
    if (ids.empty()) return;
    ++batches_;
    const double b = static_cast<double>(ids.size());
    scratch_.clear();
    for (const std::uint64_t id : ids) scratch_.push_back(id * blocks_ / n_);
    blocks_sum_ += static_cast<double>(distinct(scratch_));
    blocks_expected_ += expected_distinct(static_cast<double>(blocks_), b);
    if (chunk_ > 0) {
        scratch_.clear();
        for (const std::uint64_t id : ids) scratch_.push_back(id / chunk_);
        chunks_sum_ += static_cast<double>(distinct(scratch_));
        chunks_expected_ +=
            expected_distinct(std::ceil(static_cast<double>(n_) / static_cast<double>(chunk_)), b);
    }
}

ShuffleFigure ShuffleQuality::finish(const Communicator& comm) const {
    // Sums of doubles as fixed-point micro-units (the communicator sums integers).
    auto micro = [](double v) { return static_cast<std::uint64_t>(std::llround(v * 1e6)); };
    const std::vector<std::uint64_t> sums = comm.allreduce_sum(std::vector<std::uint64_t>{
        batches_, micro(blocks_sum_), micro(blocks_expected_), micro(chunks_sum_),
        micro(chunks_expected_), micro(jump_sum_), pairs_});
    ShuffleFigure f;
    f.blocks = blocks_;
    f.chunk_samples = chunk_;
    f.batches = sums[0];
    if (sums[0] > 0) {
        const double nb = static_cast<double>(sums[0]);
        f.blocks_per_batch = static_cast<double>(sums[1]) / 1e6 / nb;
        f.full_shuffle_blocks_per_batch = static_cast<double>(sums[2]) / 1e6 / nb;
        f.chunks_per_batch = static_cast<double>(sums[3]) / 1e6 / nb;
        f.full_shuffle_chunks_per_batch = static_cast<double>(sums[4]) / 1e6 / nb;
    }
    if (sums[6] > 0)
        f.mean_jump = static_cast<double>(sums[5]) / 1e6 / static_cast<double>(sums[6]);
    return f;
}

}  // namespace mpistage::cli
