#pragma once
// What a rank is doing when it enters one of the loader's own collectives after construction
// (internal): the tag every such collective carries, so that ranks in different loader calls
// (one starting the next epoch or destroying the loader while another still waits for a batch)
// are told so, the same way on every rank, instead of matching each other's allreduce.

#include <cstdint>
#include <string>
#include <vector>

namespace mpistage::detail {

/// The loader call a rank is in.
enum class SyncKind : std::uint64_t {
    start = 1,     ///< `Loader::epoch(e)`
    window = 2,    ///< `EpochRange::next()`: the agreement on a window of batches
    exchange = 3,  ///< `EpochRange::next()` with two-phase reads: before the step's exchange
    close = 4,     ///< `Loader::close()` or the loader's destructor
};

/// `SyncTag::left_epoch` when the loader has started no epoch yet.
constexpr std::uint64_t kNoEpochLeft = ~std::uint64_t{0};
/// `SyncTag::left_epoch` after ranks were found in different calls (positions unknown).
constexpr std::uint64_t kDivergedEpoch = ~std::uint64_t{0} - 1;

/// One rank's tag; every field must be equal on every rank.
struct SyncTag {
    SyncKind kind = SyncKind::start;
    /// start: the epoch asked for; window/exchange: the epoch in flight; close: unused.
    std::uint64_t epoch = 0;
    /// window/exchange: the step waited for and the epoch's last step + 1 (resumed epochs
    /// count from the saved step); start: `max_steps` asked for.
    std::uint64_t step = 0;
    std::uint64_t steps = 0;
    /// start/close: the epoch this rank left last, the step it left it at and its steps.
    std::uint64_t left_epoch = kNoEpochLeft;
    std::uint64_t left_step = 0;
    std::uint64_t left_steps = 0;

    static constexpr std::size_t kWords = 7;
    std::vector<std::uint64_t> words() const;
    static SyncTag from_words(const std::uint64_t* w);
    std::uint64_t hash() const;
    /// "waiting for step 4 of 10 of epoch 0", "starting epoch 1 after leaving epoch 0 at step
    /// 3 of 10", "closing (destroying) the loader after finishing epoch 0 (10 steps)".
    std::string describe() const;
};

/// The one message every rank throws when `tags` (one per rank, rank order) differ:
/// a heading saying how they differ, each group of ranks with what it does, and the remedy.
std::string describe_mismatch(const std::vector<SyncTag>& tags);

}  // namespace mpistage::detail
