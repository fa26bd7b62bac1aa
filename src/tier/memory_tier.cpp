#include "tier/memory_tier.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "comm/agree.hpp"
#include "comm/blocking_watch.hpp"
#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"
#include "mpistage/plan.hpp"
#include "pipeline/fill.hpp"
#include "tier/staging.hpp"

namespace mpistage {

std::string to_string(Stage s) {
    switch (s) {
        case Stage::memory:
            return "memory";
        case Stage::automatic:
            return "auto";
        case Stage::none:
            break;
    }
    return "none";
}

Stage parse_stage(const std::string& s) {
    if (s == "none") return Stage::none;
    if (s == "memory") return Stage::memory;
    if (s == "auto") return Stage::automatic;
    throw ConfigError("stage: unknown tier '" + s + "' (none, memory or auto)");
}

std::string to_string(StageRead r) {
    switch (r) {
        case StageRead::map:
            return "map";
        case StageRead::copy:
            return "copy";
        case StageRead::automatic:
            break;
    }
    return "auto";
}

StageRead parse_stage_read(const std::string& s) {
    if (s == "auto") return StageRead::automatic;
    if (s == "map") return StageRead::map;
    if (s == "copy") return StageRead::copy;
    throw ConfigError("stage_read: unknown method '" + s + "' (auto, map or copy)");
}

namespace detail {

namespace {

/// The node map, after a watched barrier. The communicator splits and window allocations are
/// blocking MPI collectives the watchdog cannot poll, so each group of them is entered right
/// after a watched collective (this barrier; the allgather of ragged sizes), which names a rank
/// stopped or gone before them, and each runs under a `BlockingWatch` deadline, which ends the
/// job when a rank stops inside one (as do the collective HDF5 reads of the staging read).
NodeMap arrive_and_map(const Communicator& comm, int ranks_per_node) {
    comm.barrier();
    const BlockingWatch watch(comm, "MPI_Comm_split_type (tier node map)");
    return make_node_map(comm, ranks_per_node);
}

/// A node window of `size_bytes` on this rank, under a deadline.
NodeSegment allocate_segment(const Communicator& comm, const NodeMap& nodes,
                             std::uint64_t size_bytes, const char* what) {
    const BlockingWatch watch(comm, std::string("MPI_Win_allocate_shared (tier, ") + what + ")");
    return NodeSegment(comm, nodes, size_bytes, SegmentLayout{},
                       std::string("memory tier (") + what + ")",
                       "stage with --stage-read map (Python: stage_read=\"map\"; the file's own "
                       "pages, no window), or lower --stage-budget below the shard so that "
                       "--stage auto reads the files instead");
}

}  // namespace

MemoryTier::MemoryTier(const Communicator& comm, const Source& source, int ranks_per_node,
                       bool map_node, StageRead stage_read)
    : source_(source), nodes_(arrive_and_map(comm, ranks_per_node)), rank_(comm.rank()) {
    using Clock = std::chrono::steady_clock;
    node_ = nodes_.node_of[static_cast<std::size_t>(rank_)];
    const auto& fields = source.fields();
    for (const auto& f : fields) has_ragged_ = has_ragged_ || f.ragged;
    begins_ = balanced_shard_begins(source.num_samples(), comm.size());
    layout_ = fixed_layouts(fields, begins_);
    if (stage_read != StageRead::copy && stage_mapped(comm, stage_read, map_node)) return;
    const ShardLayout& mine = layout_[static_cast<std::size_t>(rank_)];
    fixed_ = allocate_segment(comm, nodes_, mine.fixed_bytes, "fixed fields");
    // One madvise maps the pages the read writes, instead of a page fault per page in it.
    auto t0 = Clock::now();
    fixed_.populate_mine();
    times_.populate = Clock::now() - t0;
    RaggedStaging ragged(fields, has_ragged_ ? mine.count : 0);
    t0 = Clock::now();
    times_.read_method = read_shard(comm, source, mine, fixed_.mine(), ragged);
    times_.read = Clock::now() - t0;
    if (has_ragged_) stage_ragged(comm, ragged);
    fixed_.publish(comm);
    if (has_ragged_) ragged_.publish(comm);
    // With global sharding every rank reads its peers' samples: their pages are mapped now
    // (not faulted in per page by the epochs), and the touch pass loads them.
    if (map_node) {
        t0 = Clock::now();
        fixed_.populate_node();
        if (has_ragged_) ragged_.populate_node();
        times_.map_node = Clock::now() - t0;
        start_touch_pass();  // last: nothing after it throws
    }
}

namespace {

/// Local: why this rank's tier cannot map `source`'s fields, or empty when it can.
std::string mapping_refusal(const Source& source, const NodeMap& nodes) {
    if (nodes.num_nodes > 1) {
        return "the job spans " + std::to_string(nodes.num_nodes) +
               " nodes, and mapped pages are not exposed to other nodes' gets";
    }
    FileRows where;
    for (std::size_t f = 0; f < source.fields().size(); ++f) {
        const FieldInfo& info = source.fields()[f];
        if (info.ragged) return "field '" + info.name + "' is ragged";
        if (!source.file_rows(f, where)) {
            return "field '" + info.name +
                   "' is not stored row after row in native byte order in one file (a chunked, "
                   "filtered, byte-swapped or never written HDF5 dataset, TFRecord, SQLite)";
        }
    }
    return {};
}

/// Collective: throws `why` (the lowest refusing rank's) as an agreed ConfigError with
/// `StageRead::map`; with `automatic` returns it instead (empty when no rank refused).
std::string agree_refusal(const Communicator& comm, StageRead stage_read, const std::string& why) {
    try {
        agree_or_throw(
            comm, capture([&] {
                if (!why.empty()) {
                    throw ConfigError("stage_read " + to_string(stage_read) + ": " + why);
                }
            }));
    } catch (const ConfigError& e) {
        if (stage_read == StageRead::map) throw;
        return std::string(e.what()) + "; copied into a shared-memory window instead";
    }
    return {};
}

}  // namespace

bool MemoryTier::stage_mapped(const Communicator& comm, StageRead stage_read, bool map_node) {
    using Clock = std::chrono::steady_clock;
    times_.read_note = agree_refusal(comm, stage_read, mapping_refusal(source_, nodes_));
    if (!times_.read_note.empty()) return false;
    const auto& fields = source_.fields();
    const ShardLayout& mine = layout_[static_cast<std::size_t>(rank_)];
    // Each step's refusals (the system's: mmap, madvise, mlock) are this rank's `why`, agreed
    // at the end; the file's faults (rows outside it, a failed read) are agreed errors.
    std::string why;
    auto t0 = Clock::now();
    agree_or_throw(comm, capture([&] {
                       for (std::size_t f = 0; f < fields.size(); ++f) {
                           FileRows where;
                           source_.file_rows(f, where);
                           mapped_.emplace_back(where, fields[f].sample_bytes,
                                                source_.num_samples());
                           if (why.empty()) why = mapped_.back().map();
                       }
                   }));
    times_.populate = Clock::now() - t0;
    t0 = Clock::now();
    agree_or_throw(comm, capture([&] {
                       for (const MappedRows& m : mapped_) {
                           if (why.empty()) why = m.read_in(mine.first, mine.count);
                       }
                   }));
    for (const MappedRows& m : mapped_) {
        if (why.empty()) why = m.lock(mine.first, mine.count);
    }
    times_.read_note = agree_refusal(comm, stage_read, why);
    if (!times_.read_note.empty()) {
        mapped_.clear();  // unmapped and unlocked on every rank; the copy follows
        times_.populate = {};
        return false;
    }
    // Pages read in before a truncation are served from memory: stage only the files opened.
    agree_or_throw(comm, capture([&] { source_.check_unchanged(); }));
    times_.read = Clock::now() - t0;
    times_.read_method = "mapped";
    for (std::size_t f = 0; f < mapped_.size(); ++f) {
        bool seen = false;
        for (std::size_t g : checked_) seen = seen || mapped_[g].fd() == mapped_[f].fd();
        if (!seen) checked_.push_back(f);
    }
    install_sigbus_guard();
    if (map_node) {
        // One node (mapping_refusal): every other rank's rows, whose owners' locks keep them in
        // memory. Only an optimisation: a refusal leaves the first loads to the first epoch.
        t0 = Clock::now();
        const std::uint64_t end = mine.first + mine.count;
        agree_or_throw(comm, capture([&] {
                           for (const MappedRows& m : mapped_) {
                               (void)m.read_in(0, mine.first);
                               (void)m.read_in(end, begins_.back() - end);
                           }
                       }));
        times_.map_node = Clock::now() - t0;
        start_touch_pass();  // last: nothing after it throws
    }
    return true;
}

void MemoryTier::start_touch_pass() noexcept {
    try {
        std::vector<TouchSpan> spans;
        for (const MappedRows& m : mapped_) spans.push_back({m.row(0), m.bytes()});
        for (const NodeSegment* s : {&fixed_, &ragged_}) {
            for (int r = 0; r < s->node_size(); ++r)
                spans.push_back({s->base(r), s->size_bytes(r)});
        }
        touch_.start(std::move(spans));
    } catch (...) {  // std::bad_alloc: no pass, the epochs pay the first loads themselves
    }
}

MemoryTier::~MemoryTier() = default;

void MemoryTier::stage_ragged(const Communicator& comm, RaggedStaging& staged) {
    const auto& fields = source_.fields();
    std::vector<std::uint64_t> mine(fields.size(), 0);
    for (std::size_t f = 0; f < fields.size(); ++f) mine[f] = staged.fields[f].total_bytes;
    const auto all = comm.allgather(mine);  // rank-major: every rank's value bytes per field
    for (std::size_t r = 0; r < layout_.size(); ++r) {
        ShardLayout& l = layout_[r];
        std::uint64_t off = 0;
        for (std::size_t f = 0; f < fields.size(); ++f) {
            if (!fields[f].ragged) continue;
            l.field_offset[f] = off;
            off += checked_mul(l.count + 1, sizeof(std::uint64_t), "tier: ragged offsets");
            l.values_offset[f] = off;
            off = (off + all[r * fields.size() + f] + 63) / 64 * 64;
        }
        l.ragged_bytes = off;
    }
    const ShardLayout& me = layout_[static_cast<std::size_t>(rank_)];
    ragged_ = allocate_segment(comm, nodes_, me.ragged_bytes, "ragged fields");
    const auto t0 = std::chrono::steady_clock::now();
    ragged_.populate_mine();
    times_.populate += std::chrono::steady_clock::now() - t0;
    copy_ragged(fields, me, staged, ragged_.mine());
}

std::uint64_t MemoryTier::staged_bytes() const noexcept {
    const ShardLayout& l = layout_[static_cast<std::size_t>(rank_)];
    return l.fixed_bytes + l.ragged_bytes;
}

void MemoryTier::read_local(std::uint64_t id, int owner, std::size_t k, BatchSink& sink) const {
    const auto& fields = source_.fields();
    const ShardLayout& l = layout_[static_cast<std::size_t>(owner)];
    const std::uint64_t i = id - l.first;
    const int node_rank = nodes_.node_rank_of[static_cast<std::size_t>(owner)];
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (!fields[f].ragged) {
            const std::uint64_t sb = fields[f].sample_bytes;
            std::memcpy(sink.fixed(f, k), fixed_.base(node_rank) + l.field_offset[f] + i * sb, sb);
            continue;
        }
        const std::byte* base = ragged_.base(node_rank);
        std::uint64_t range[2];
        std::memcpy(range, base + l.field_offset[f] + i * sizeof(std::uint64_t), sizeof(range));
        std::byte* dst = sink.ragged(f, k, range[1] - range[0]);
        if (range[1] > range[0]) {
            std::memcpy(dst, base + l.values_offset[f] + range[0], range[1] - range[0]);
        }
    }
}

void MemoryTier::read_remote(std::uint64_t id, int owner, std::size_t k, BatchSink& sink) const {
    const auto& fields = source_.fields();
    const ShardLayout& l = layout_[static_cast<std::size_t>(owner)];
    const std::uint64_t i = id - l.first;
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (!fields[f].ragged) {
            const std::uint64_t sb = fields[f].sample_bytes;
            fixed_.get_nowait(sink.fixed(f, k), sb, owner, l.field_offset[f] + i * sb);
            continue;
        }
        std::uint64_t range[2];
        ragged_.get(reinterpret_cast<std::byte*>(range), sizeof(range), owner,
                    l.field_offset[f] + i * sizeof(std::uint64_t));
        // The sink may move earlier values when it grows, so each get completes before the
        // next destination is requested.
        std::byte* dst = sink.ragged(f, k, range[1] - range[0]);
        ragged_.get(dst, range[1] - range[0], owner, l.values_offset[f] + range[0]);
    }
}

namespace {

std::atomic<std::uint64_t> g_failing_id{~std::uint64_t{0}};

}  // namespace

void fail_tier_reads_of(std::uint64_t id) noexcept {
    g_failing_id.store(id, std::memory_order_relaxed);
}

void MemoryTier::check_id(std::uint64_t id) const {
    if (id >= begins_.back()) {
        throw ConfigError("tier: sample id " + std::to_string(id) +
                          " out of range (N = " + std::to_string(begins_.back()) + ")");
    }
    if (id == g_failing_id.load(std::memory_order_relaxed)) {
        throw IoError("tier: injected read failure at sample " + std::to_string(id));
    }
}

void MemoryTier::read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const {
    if (!mapped_.empty()) {
        for (std::size_t k = 0; k < count; ++k) check_id(ids[k]);
        // Idle since the tier's previous read ended, by any thread (the clock's epoch: never).
        const auto start = std::chrono::steady_clock::now().time_since_epoch();
        const std::chrono::nanoseconds idle =
            start - std::chrono::nanoseconds(last_read_end_ns_.load(std::memory_order_relaxed));
        struct Stamp {  // however the read ends
            std::atomic<std::int64_t>& end;
            ~Stamp() {
                end.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count(),
                          std::memory_order_relaxed);
            }
        } stamp{last_read_end_ns_};
        read_mapped(mapped_, ids, count, sink, idle);
        // After the copy: a truncation inside a page zero-fills the rest of it without a
        // SIGBUS, and its new size is visible before those zeros are.
        for (std::size_t f : checked_) mapped_[f].check_file();
        return;
    }
    bool remote = false;
    try {
        for (std::size_t k = 0; k < count; ++k) {
            check_id(ids[k]);
            const auto owner =
                static_cast<int>(std::upper_bound(begins_.begin(), begins_.end(), ids[k]) -
                                 begins_.begin()) -
                1;
            if (nodes_.node_of[static_cast<std::size_t>(owner)] == node_) {
                read_local(ids[k], owner, k, sink);
            } else {
                remote = true;
                read_remote(ids[k], owner, k, sink);
            }
        }
    } catch (...) {
        // The started gets write into the sink's slot: wait for them before it is reused.
        if (remote) {
            try {
                fixed_.flush_gets();
            } catch (...) {  // the first error is the one reported
            }
        }
        throw;
    }
    // One flush for the fixed fields of every remote sample of the batch, not one per get.
    if (remote) fixed_.flush_gets();
}

}  // namespace detail
}  // namespace mpistage
