// Shuffle::chunks in the loader: its chunk and window sizes derived from the memory budget, and
// stage auto choosing it over the global shuffle when the data exceeds the budget
// (docs/shuffle.md).
#include <algorithm>
#include <string>

#include "loader/loader_impl.hpp"
#include "tier/chunk_read_ahead.hpp"
#include "util/memory_budget.hpp"

namespace mpistage {

namespace {

/// Chunks per window when the loader chooses: 256. On a class-sorted Fashion-MNIST with a
/// quarter of the file as budget, windows of 16 chunks trained 8 points below the global
/// shuffle and 64 chunks 2 points below; 256 within a point (benchmarks/README.md,
/// "Class-sorted data"). More chunks per window at the same memory means smaller reads.
constexpr std::uint64_t kWindowChunks = 256;
/// The largest chunk the loader chooses: one sequential read of 64 MiB.
constexpr std::uint64_t kMaxChunkBytes = std::uint64_t{64} << 20;

/// Mean bytes of a sample: exact for fixed fields; ragged sizes from up to 1024 samples at
/// evenly spaced ids (index look-ups, the same on every rank).
std::uint64_t mean_sample_bytes(const Source& source, std::uint64_t n) {
    const std::uint64_t probes = std::min<std::uint64_t>(n, 1024);
    std::uint64_t sum = 0;
    for (std::uint64_t i = 0; i < probes; ++i) sum += source.sample_bytes(i * (n / probes));
    return std::max<std::uint64_t>(1, sum / probes);
}

}  // namespace

void Loader::Impl::resolve_chunk_shuffle(const detail::TierStats& tier) {
    PlanOptions& plan = options.plan;
    requested_shuffle = plan.shuffle;
    const bool chosen_by_auto = tier.over_budget && options.tier.stage == Stage::automatic &&
                                plan.shuffle == Shuffle::global && !plan.balance_steps;
    // Stage auto with a global shuffle may resume a saved job's chunk order (resume.cpp):
    // the budget and sample size are known then too.
    const bool may_resume_chunks = options.tier.stage == Stage::automatic &&
                                   plan.shuffle == Shuffle::global && !plan.balance_steps;
    if (plan.shuffle != Shuffle::chunks && !may_resume_chunks) return;
    std::uint64_t budget = tier.budget_bytes;
    if (budget == 0) budget = options.tier.stage_budget_bytes;  // stage none, a budget given
    if (budget == 0) {  // stage none: the default share of the node's memory
        comm.split_node();
        budget = detail::memory_share_bytes(comm.node_size());
    }
    read_ahead_budget = comm.allreduce_min(budget);  // nodes of different sizes: one size
    chunk_sample_bytes = mean_sample_bytes(source, num_samples);
    if (plan.shuffle != Shuffle::chunks && !chosen_by_auto) return;
    chunk_samples_derived = plan.chunk_samples == 0;
    window_chunks_derived = plan.window_chunks == 0;
    if (plan.window_chunks == 0) plan.window_chunks = kWindowChunks;
    if (plan.chunk_samples == 0) {
        // A rank holds the window it draws from and the next one read ahead: two windows,
        // each of up to K + 1 chunks (a window need not start at a chunk), and one chunk in
        // flight more, within its budget.
        // Each chunk is a mapping of whole pages: the most whole pages that fit its share.
        const std::uint64_t share =
            std::min(kMaxChunkBytes,
                     std::max<std::uint64_t>(1, read_ahead_budget / (2 * plan.window_chunks + 3)));
        const std::uint64_t page = detail::ChunkMemory::mapped_size(1);
        const std::uint64_t chunk_bytes = share >= page ? share / page * page : share;
        plan.chunk_samples = std::max<std::uint64_t>(1, chunk_bytes / chunk_sample_bytes);
    }
    if (chosen_by_auto) {
        plan.shuffle = Shuffle::chunks;
        chunk_note_prefix =
            "auto: the data exceeds the stage budget, so shuffle 'chunks' replaces 'global' "
            "(sequential reads of chunks instead of one random read per sample); ";
    }
    describe_chunk_shuffle();
}

void Loader::Impl::describe_chunk_shuffle() {
    const PlanOptions& plan = options.plan;
    const std::string budget = std::to_string(read_ahead_budget) + " bytes per rank";
    const std::string derived_from =
        chunk_samples_derived && window_chunks_derived ? ", derived from the budget of " + budget
        : chunk_samples_derived ? ", the chunk derived from the budget of " + budget
        : window_chunks_derived ? ", the window the default (budget " + budget + ")"
                                : "";
    const std::uint64_t chunk_bytes = plan.chunk_samples * chunk_sample_bytes;
    // Two windows of up to K + 1 chunks and one in flight (as the derivation sizes them), each
    // chunk whole pages.
    const std::uint64_t held =
        detail::ChunkMemory::mapped_size(chunk_bytes) * (2 * plan.window_chunks + 3);
    stats.shuffle_note =
        chunk_note_prefix + "chunks of " + std::to_string(plan.chunk_samples) + " samples (" +
        std::to_string(chunk_bytes) + " bytes), windows of " + std::to_string(plan.window_chunks) +
        " chunks per rank" +
        (chunk_sizes_resumed ? ", as the resumed state's order has them" : derived_from) +
        (detail::ChunkReadAhead::supports(source)
             ? ""
             : "; not read ahead by chunks (a source without fields)") +
        (held > read_ahead_budget && chunk_bytes > 0
             ? "; two windows of these chunks (" + std::to_string(held) +
                   " bytes) exceed the read-ahead's budget of " +
                   std::to_string(read_ahead_budget) +
                   " bytes per rank: the chunks a read waits for are read over it "
                   "(ranks[].read_ahead.over_budget_chunks); fewer or smaller chunks keep to it"
             : "");
}

}  // namespace mpistage
