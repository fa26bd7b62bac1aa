#pragma once
// The memory tier (LoaderOptions::tier.stage): the dataset staged once in node memory, read back as
// a Source by the prefetch pipeline (internal; docs/architecture.md, "Memory tier"). The tier
// takes its own options and reports into its own stats (TierSetup, TierStats), which the
// loader fills from LoaderOptions and copies into LoaderStats, so the tier sits below the
// loader and includes none of its headers.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/node_segment.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"
#include "mpistage/tier.hpp"
#include "tier/mapped_rows.hpp"
#include "tier/touch_pass.hpp"

namespace mpistage::detail {

/// Where one rank's staged shard lies in its two segments (every rank knows every rank's).
struct ShardLayout {
    std::uint64_t first = 0;  ///< first sample id of the shard
    std::uint64_t count = 0;  ///< samples in the shard
    /// Per field: fixed fields, offset of the [count, sample_bytes] block in the fixed segment;
    /// ragged fields, offset of the count + 1 uint64 value offsets in the ragged segment.
    std::vector<std::uint64_t> field_offset;
    /// Per field: ragged fields, offset of the concatenated values in the ragged segment.
    std::vector<std::uint64_t> values_offset;
    std::uint64_t fixed_bytes = 0;
    std::uint64_t ragged_bytes = 0;
};

/// The options the memory tier is built from: the `stage*` fields of LoaderOptions (documented
/// there) and whether the plan shards globally. Every field must be equal on every rank
/// (checked by `build_memory_tier`).
struct TierSetup {
    Stage stage = Stage::none;
    std::uint64_t stage_budget_bytes = 0;
    int stage_ranks_per_node = 0;
    StageRead stage_read = StageRead::automatic;
    /// Global sharding: every rank reads its peers' samples, so the tier maps every segment
    /// of the node for reading (`MemoryTier`'s `map_node`).
    bool map_node = false;
};

/// Where one rank's staging time went (copied into LoaderStats::stage_*).
struct StageTimes {
    /// Mapping this rank's own segment for writing before the read (MADV_POPULATE_WRITE).
    std::chrono::duration<double> populate{0};
    /// The read of the shard from the files into the window, unchanged-file check included.
    std::chrono::duration<double> read{0};
    /// Mapping every segment of the node for reading after the read (MADV_POPULATE_READ;
    /// global sharding only). The touch pass that follows runs from the first epoch on and is
    /// not counted.
    std::chrono::duration<double> map_node{0};
    /// "mapped" (the files' pages, `StageRead::map`), "independent" (preads of the rank's
    /// contiguous range) or "collective" (MPI-IO).
    std::string read_method;
    /// Why `StageRead::automatic` copied instead of mapping (agreed), else empty.
    std::string read_note;
};

/// What `build_memory_tier` reports: the tier fields of LoaderStats (documented there), which
/// the loader copies in as they are.
struct TierStats {
    /// "memory" or "file" (same on every rank).
    std::string tier = "file";
    std::string tier_note;
    /// The stage budget per rank (stage_budget_bytes, or the default share of the node's
    /// memory), 0 with stage none; and whether some rank's shard exceeded it (stage auto).
    std::uint64_t budget_bytes = 0;
    bool over_budget = false;
    std::uint64_t staged_bytes = 0;
    /// Wall time of the tier's construction (the staging read), 0 when not staged.
    std::chrono::duration<double> stage_time{0};
    /// Its parts and how the shard was taken in (default: not staged).
    StageTimes times;
};

/// The staged dataset as a Source: `read` copies samples from node memory (plain loads on the
/// same node, MPI_Get from other nodes). Construction and destruction are collective over the
/// loader's communicator; `read` is independent and thread-safe (it calls MPI only when the
/// job spans several nodes: `reads_use_mpi`). Borrows `source`, which must outlive it.
class MemoryTier final : public Source {
public:
    /// Collective: stages this rank's shard `[begins[r], begins[r+1])` of `source` in memory.
    /// Mapped (`StageRead::map`, or `automatic` where it applies): every fixed field's file is
    /// mapped and the shard's pages are read in and locked, so the node holds the page cache's
    /// one copy. Copied (`copy`, or `automatic` otherwise): the shard is read into a node
    /// shared-memory window (its pages mapped in one call first). With `map_node` (global
    /// sharding: every rank reads its peers' samples) it then maps every rank's part of the
    /// node into this process for reading and starts a thread that loads one byte per page of
    /// it from the first epoch on (the touch pass), so later epochs read peers' samples at the
    /// steady rate; the process's RSS then counts the node's whole tier (shared pages: the node
    /// holds one copy). Destruction stops and joins that thread first.
    /// @throws what the source's reads throw, IoError (mapping: a failed read-in, naming the
    /// file and bytes), ConfigError (`map` where it does not apply, naming why), MpiError;
    /// identically on every rank.
    MemoryTier(const Communicator& comm, const Source& source, int ranks_per_node, bool map_node,
               StageRead stage_read);
    ~MemoryTier() override;
    MemoryTier(const MemoryTier&) = delete;
    MemoryTier& operator=(const MemoryTier&) = delete;

    const std::vector<FieldInfo>& fields() const override { return source_.fields(); }
    std::uint64_t num_samples() const override { return source_.num_samples(); }
    std::uint64_t records_in_cut(int rank, int world_size) const override {
        return source_.records_in_cut(rank, world_size);
    }
    std::string fingerprint() const override { return source_.fingerprint(); }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override;
    bool reads_use_mpi() const override { return nodes_.num_nodes > 1; }
    std::vector<SourceStatistic> statistics() const override { return source_.statistics(); }
    std::vector<std::string> notes() const override { return source_.notes(); }

    /// Bytes this rank holds (fixed + ragged segments).
    std::uint64_t staged_bytes() const noexcept;
    /// Where this rank's staging time went.
    const StageTimes& stage_times() const noexcept { return times_; }
    /// Nodes the tier spans (1: every read is a plain load).
    int num_nodes() const noexcept { return nodes_.num_nodes; }

private:
    /// Collective: the mapped staging; false on every rank (nothing mapped) when `automatic`
    /// does not apply, with the agreed reason in `times_.read_note`.
    bool stage_mapped(const Communicator& comm, StageRead stage_read, bool map_node);
    void stage_ragged(const Communicator& comm, struct RaggedStaging& staged);
    /// Local: starts `touch_` over everything this rank may read (every mapped field, or every
    /// segment of the node). Called last in staging with global sharding (nothing after it
    /// throws). Never throws.
    void start_touch_pass() noexcept;
    /// @throws ConfigError for an id out of range; IoError from `fail_tier_reads_of`.
    void check_id(std::uint64_t id) const;
    void read_local(std::uint64_t id, int owner, std::size_t k, BatchSink& sink) const;
    /// Starts the gets of sample `id`'s fixed fields (completed by `fixed_.flush_gets()`);
    /// ragged fields are read to completion (their destinations move as the sink grows).
    void read_remote(std::uint64_t id, int owner, std::size_t k, BatchSink& sink) const;

    const Source& source_;
    NodeMap nodes_;
    int rank_ = 0;
    int node_ = 0;
    bool has_ragged_ = false;
    std::vector<std::uint64_t> begins_;
    std::vector<ShardLayout> layout_;
    NodeSegment fixed_;
    NodeSegment ragged_;
    /// Per fixed field, its rows mapped from the file (mapped staging; empty when copied).
    std::vector<MappedRows> mapped_;
    /// Indices into `mapped_` of one field per file (checked after every mapped read).
    std::vector<std::size_t> checked_;
    /// When the last mapped read ended (steady clock, ns since its epoch; 0: never), written by
    /// every reading thread: how long the tier was idle before a read (`read_mapped`).
    mutable std::atomic<std::int64_t> last_read_end_ns_{0};
    StageTimes times_;
    /// The touch pass (`start_touch_pass`; global sharding only). Last, so it is stopped and
    /// joined before the mappings and windows it reads go.
    TouchPass touch_;
};

/// Fault injection for tests (tests/mpi/loader/test_loader_lag.cpp): from now on this
/// process's memory-tier reads of sample `id` throw IoError, as a failed remote get would
/// (~0: none, the default). Thread-safe (an atomic); not collective.
void fail_tier_reads_of(std::uint64_t id) noexcept;

/// Collective over `comm`: applies `options.stage` (agreeing on the stage options first):
/// returns the memory tier, or nullptr for `none` and for `automatic` over budget. Fills
/// `stats`. `ring_bytes` is this rank's ring. @throws ConfigError (`memory` over budget,
/// naming the bytes), the source's errors, MpiError; identically on every rank.
std::unique_ptr<MemoryTier> build_memory_tier(const Communicator& comm, const Source& source,
                                              const TierSetup& options, std::uint64_t ring_bytes,
                                              TierStats& stats);

}  // namespace mpistage::detail
