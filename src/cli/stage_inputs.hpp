#pragma once
// The inputs of `mpistage stage`, each opened from the one StageArgs and served to the one
// stage loop (stage_command.cpp) through the same small interface (internal to the CLI):
//   epoch(e)            a range of HostBatch (`for (const auto& batch : input.epoch(e))`)
//   planned_steps(r)    steps of the range when known before the first batch (0: a stream)
//   stopped(r)          the range ended on an agreed stop (--stop-signals; files only)
//   consume(b)          the last hop of a batch (device staging of files), after it was counted
//   oversize(r, b)      batch b of range r is one sample over a budget
//   expected(r, prior)  distinct valid ids the whole epoch yields over all ranks (--verify)
//   note_epoch(r, rep)  what the input adds to the epoch's report (byte balance, padding waste)
//   snapshot()          collective: the state --save-state writes
//   shuffle_quality()   the accumulator of the epoch's shuffle-quality figure (none: streams)
//   totals(), tier_stats(), describe(o)
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/checkpoint.hpp"
#include "cli/flag_rules.hpp"
#include "cli/report.hpp"
#include "cli/shuffle_quality.hpp"
#include "mpistage/loader.hpp"
#include "mpistage/sqlite_source.hpp"
#include "mpistage/stream.hpp"

namespace mpistage::cli {

/// Local: index in `fields` of the ragged field named `name` ("" = the only ragged field);
/// `input` names the input kind in the error. @throws ConfigError naming --batch-tokens,
/// --token-field and the ragged fields.
std::size_t token_field_index(const std::vector<FieldInfo>& fields, const std::string& name,
                              const std::string& input);

/// Local: where a saved state stands, in words ("epoch 1, step 20, 640 of 1000 samples
/// consumed"), for the report.
std::string state_note(const SavedState& s, std::uint64_t num_samples);

/// FILE input: the library's `Loader`, with fixed-size batches or batches sized by a byte or
/// token budget (`PlanOptions::budget`, from --batch-bytes/--batch-tokens).
class FileInput {
public:
    /// Collective: opens the loader over `source` (from `resume` when given). `kind` names
    /// the input in errors (a --token-field that is not a ragged field).
    FileInput(const Communicator& comm, const Source& source, const StageArgs& a,
              const std::optional<SavedState>& resume, InputKind kind);
    EpochRange epoch(std::uint64_t e) { return loader_.epoch(e); }
    std::uint64_t planned_steps(const EpochRange& r) const noexcept { return r.steps(); }
    /// The range ended early on an agreed stop (a --stop-signals signal on some rank).
    bool stopped(const EpochRange& r) const noexcept { return r.stopped(); }
    /// Nothing to do: with a CUDA device the loader delivered the batch there already.
    void consume(const HostBatch&) {}
    bool oversize(const EpochRange& r, const HostBatch& b) const noexcept {
        return r.plan().batch_oversize(b.step() - r.plan().first_step);
    }
    std::uint64_t expected(const EpochRange& r, std::uint64_t prior) const {
        return prior + r.totals().valid_samples;
    }
    void note_epoch(const EpochRange& r, EpochReport& rep) const;
    /// Collective: the loader state.
    std::optional<SavedState> snapshot() const;
    /// This rank's counters beyond what the loop counts (bytes, waits, moves, device).
    RankTotals totals() const;
    const LoaderStats& tier_stats() const noexcept { return loader_.stats(); }
    std::optional<ShuffleQuality> shuffle_quality() const {
        const PlanOptions& p = loader_.options().plan;
        return ShuffleQuality(loader_.num_samples(),
                              p.shuffle == Shuffle::chunks ? p.chunk_samples : 0);
    }
    /// Fills the input part of the report (sizes, options, fields).
    void describe(const StageArgs& a, StageOutcome& o) const;
    /// Samples are identified by their position in the files (no content check).
    static constexpr bool kRowContent = false;
    bool dense_ids() const { return true; }
    void collect(const HostBatch&, std::vector<std::uint64_t>&) const {}
    const std::vector<std::uint64_t>& reference(const Communicator&) { return no_reference_; }

private:
    std::vector<std::uint64_t> no_reference_;
    Loader loader_;
};

/// A --sqlite query as a stream; each epoch is one pass of the query.
class StreamInput {
public:
    /// Collective: opens the database and the library's `Loader` over it as a stream (from
    /// `resume` when given).
    StreamInput(const Communicator& comm, const StageArgs& a,
                const std::optional<SavedState>& resume);
    EpochRange epoch(std::uint64_t e) { return loader_->epoch(e); }
    std::uint64_t planned_steps(const EpochRange&) const noexcept { return 0; }
    bool stopped(const EpochRange& r) const noexcept { return r.stopped(); }
    void consume(const HostBatch&) {}
    bool oversize(const EpochRange& r, const HostBatch&) const noexcept {
        return r.last_oversize();
    }
    std::uint64_t expected(const EpochRange&, std::uint64_t) const { return rows_; }
    void note_epoch(const EpochRange&, EpochReport&) const {}
    std::optional<SavedState> snapshot() const;
    RankTotals totals() const;
    const LoaderStats& tier_stats() const noexcept { return loader_->stats(); }
    /// Rows come in query order: no shuffle to measure.
    std::optional<ShuffleQuality> shuffle_quality() const { return std::nullopt; }
    void describe(const StageArgs& a, StageOutcome& o) const;
    /// Rank 0: the ids `state` had delivered in its pass (the prior run's, for --verify).
    static std::vector<std::int64_t> consumed_ids(const LoaderState& state);
    /// Rows have identities beyond their position: --verify compares their contents.
    static constexpr bool kRowContent = true;
    /// Ids are the rows' positions 0..rows-1 (one stream; not with key ranges).
    bool dense_ids() const { return source_->num_streams() == 1; }
    /// Local: appends the content hash (`sample_content_hash`) of every valid row of `b`.
    void collect(const HostBatch& b, std::vector<std::uint64_t>& hashes) const;
    /// Collective (the first call): on rank 0 the sorted content hashes of every row of the
    /// query in the source's snapshot (read once again by rank 0), empty elsewhere.
    /// @throws what reading the rows throws, the same on every rank.
    const std::vector<std::uint64_t>& reference(const Communicator& comm);

private:
    std::unique_ptr<SqliteSource> source_;
    std::unique_ptr<Loader> loader_;
    std::uint64_t rows_ = 0;
    std::vector<std::uint64_t> reference_;
    bool have_reference_ = false;
};

}  // namespace mpistage::cli
