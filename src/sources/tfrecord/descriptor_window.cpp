// TfRecordSource: the record descriptors of all ranks gathered into one MPI-3 shared-memory
// window per node (tfrecord_source.hpp, "Memory"; docs/architecture.md, "TFRecord descriptors
// once per node").
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "comm/agree.hpp"
#include "comm/blocking_watch.hpp"
#include "sources/tfrecord/dali_index.hpp"
#include "sources/tfrecord/source_state.hpp"
#include "util/memory_budget.hpp"
#include "util/page_populate.hpp"

namespace mpistage::tfrecord {

namespace {

/// Descriptors per broadcast when the job spans several nodes (4 MiB).
constexpr std::uint64_t kChunkRecords = std::uint64_t{1} << 18;

/// Which ids of the node's array each rank of the communicator holds in its segment.
struct Segments {
    std::vector<std::uint64_t> first;  ///< first id of rank r's segment
    std::vector<std::uint64_t> count;  ///< ids in rank r's segment
};

/// On one node every rank's segment is the records it found (nothing is copied); on several
/// nodes every node holds all N, split evenly among its ranks in node-rank order.
Segments plan_segments(const detail::NodeMap& nodes, const std::vector<std::uint64_t>& found,
                       const std::vector<std::uint64_t>& found_first, std::uint64_t total) {
    Segments s;
    if (nodes.num_nodes == 1) {
        s.first = found_first;
        s.count = found;
        return s;
    }
    const std::size_t w = nodes.node_of.size();
    std::vector<std::uint64_t> ranks_on(static_cast<std::size_t>(nodes.num_nodes), 0);
    for (const int n : nodes.node_of) ++ranks_on[static_cast<std::size_t>(n)];
    s.first.resize(w);
    s.count.resize(w);
    // floor(total · k / l) without overflow: q·k + floor(rem · k / l), rem, k < l < 2^32.
    auto cut = [total](std::uint64_t k, std::uint64_t l) {
        return total / l * k + total % l * k / l;
    };
    for (std::size_t r = 0; r < w; ++r) {
        const std::uint64_t l = ranks_on[static_cast<std::size_t>(nodes.node_of[r])];
        const auto k = static_cast<std::uint64_t>(nodes.node_rank_of[r]);
        s.first[r] = cut(k, l);
        s.count[r] = cut(k + 1, l) - s.first[r];
    }
    return s;
}

/// Several nodes: every rank broadcasts its records in pieces of kChunkRecords, in rank order;
/// each rank keeps the part that falls into its own segment.
void fill_from_broadcasts(const Communicator& comm, const std::vector<RecordRef>& local,
                          const std::vector<std::uint64_t>& found,
                          const std::vector<std::uint64_t>& found_first, std::uint64_t seg_first,
                          std::uint64_t seg_count, std::byte* mine) {
    std::vector<std::uint64_t> chunk;
    for (int r = 0; r < comm.size(); ++r) {
        const auto ur = static_cast<std::size_t>(r);
        for (std::uint64_t at = 0; at < found[ur]; at += kChunkRecords) {
            const std::uint64_t n = std::min(kChunkRecords, found[ur] - at);
            chunk.assign(2 * n, 0);
            if (r == comm.rank())
                std::memcpy(chunk.data(), local.data() + at, n * sizeof(RecordRef));
            chunk = comm.broadcast(chunk, r);
            const std::uint64_t g = found_first[ur] + at;
            const std::uint64_t lo = std::max(g, seg_first);
            const std::uint64_t hi = std::min(g + n, seg_first + seg_count);
            if (lo < hi) {
                std::memcpy(mine + (lo - seg_first) * sizeof(RecordRef),
                            chunk.data() + 2 * (lo - g), (hi - lo) * sizeof(RecordRef));
            }
        }
    }
}

/// One node: moves this rank's found records into its segment in pieces, handing each copied
/// piece's whole pages back to the kernel (`MADV_DONTNEED`: `found` is never read again and is
/// freed right after), so the move needs about one segment of memory, not two. The advice is
/// only advice: where it fails, the move costs the vector until it is freed.
void move_into_segment(std::vector<RecordRef>& found, std::byte* segment) {
    constexpr std::uint64_t kPieceBytes = std::uint64_t{16} << 20;
    const std::uintptr_t page = detail::page_bytes();
    auto* from = reinterpret_cast<std::byte*>(found.data());
    const std::uint64_t bytes = found.size() * sizeof(RecordRef);
    for (std::uint64_t at = 0; at < bytes; at += kPieceBytes) {
        const std::uint64_t n = std::min(kPieceBytes, bytes - at);
        std::memcpy(segment + at, from + at, n);
        const std::uintptr_t lo = (reinterpret_cast<std::uintptr_t>(from + at) + page - 1) / page;
        const std::uintptr_t hi = reinterpret_cast<std::uintptr_t>(from + at + n) / page;
        if (hi > lo) {
            (void)madvise(reinterpret_cast<void*>(lo * page), (hi - lo) * page, MADV_DONTNEED);
        }
    }
    found = {};
}

/// The node's segments must form one array in node-rank order (MPI's default layout for
/// `MPI_Win_allocate_shared`); checked, since every read indexes that array directly.
void check_contiguous(const detail::NodeMap& nodes, const detail::NodeSegment& window,
                      const Segments& s, int rank) {
    const int node = nodes.node_of[static_cast<std::size_t>(rank)];
    for (std::size_t r = 0; r < s.first.size(); ++r) {
        if (nodes.node_of[r] != node || s.count[r] == 0) continue;
        const std::byte* want = window.node_base() + s.first[r] * sizeof(RecordRef);
        if (window.base(nodes.node_rank_of[r]) != want) {
            throw MpiError(
                "tfrecord: the descriptor window of this node is not contiguous "
                "(MPI_Win_allocate_shared placed the segment of rank " +
                std::to_string(r) + " elsewhere)");
        }
    }
}

}  // namespace

void exchange_descriptors(const Communicator& comm, SourceState& state, LocalRecords local) {
    state.skipped = comm.allreduce_sum(local.skipped);
    state.skipped_bytes = comm.allreduce_sum(local.skipped_bytes);
    const std::vector<std::uint64_t> found = comm.allgather(local.records.size());
    std::vector<std::uint64_t> found_first(found.size(), 0);
    std::uint64_t total = 0;
    for (std::size_t r = 0; r < found.size(); ++r) {
        found_first[r] = total;
        total += found[r];
    }
    run_agreed(comm, [&] {
        if (total == 0) {
            throw FormatError("tfrecord: no valid records in " +
                              std::to_string(state.files.size()) +
                              " file(s) (first: " + state.files[0].path + ", " +
                              std::to_string(state.skipped) + " skipped)");
        }
    });
    {
        comm.barrier();  // names a rank that never arrives before the blocking split
        const detail::BlockingWatch watch(comm,
                                          "MPI_Comm_split_type (tfrecord descriptor node map)");
        // The node split (once; made by the index-free scan already): the node's rank count
        // for the memory check below, and the node communicator unless test "nodes" are asked.
        comm.split_node();
        state.descriptor_nodes =
            detail::make_node_map(comm, state.options.descriptor_ranks_per_node);
    }
    const Segments seg = plan_segments(state.descriptor_nodes, found, found_first, total);
    const auto me = static_cast<std::size_t>(comm.rank());
    // The node's window costs 16 B × N once per node; a rank's share of it is its segment, plus
    // the records it found while they are exchanged (the same inputs on every rank of a node).
    run_agreed(comm, [&] {
        detail::check_memory_share(
            detail::saturating_mul(seg.count[me] + found[me], sizeof(RecordRef)), comm.node_size(),
            "tfrecord: the descriptors of " + std::to_string(total) + " records in " +
                std::to_string(state.files.size()) + " file(s) (first: " + state.files[0].path +
                "; 16 bytes a record, held once per node)",
            "split the dataset into several sources or run on more nodes");
    });
    {
        const detail::BlockingWatch watch(
            comm, "MPI_Win_allocate_shared (tfrecord descriptors, " +
                      std::to_string(seg.count[me] * sizeof(RecordRef)) + " bytes)");
        detail::SegmentLayout layout;
        layout.contiguous = true;
        layout.cross_node = false;
        state.descriptor_window = detail::NodeSegment(
            comm, state.descriptor_nodes, seg.count[me] * sizeof(RecordRef), layout,
            "tfrecord: the descriptors of " + std::to_string(total) + " records (first file: " +
                state.files[0].path + ")",
            "split the dataset into several sources or run on more nodes");
    }
    run_agreed(comm, [&] {
        check_contiguous(state.descriptor_nodes, state.descriptor_window, seg, comm.rank());
    });
    if (state.descriptor_nodes.num_nodes == 1) {
        move_into_segment(local.records, state.descriptor_window.mine());
    } else {
        fill_from_broadcasts(comm, local.records, found, found_first, seg.first[me], seg.count[me],
                             state.descriptor_window.mine());
    }
    local.records = {};
    state.descriptor_window.publish(comm);
    state.records = reinterpret_cast<const RecordRef*>(state.descriptor_window.node_base());
    state.num_records = total;
    // Global checks on the node's array (the same content on every node: the same outcome on
    // every rank).
    run_agreed(comm, [&] {
        if (!state.options.index_paths.empty()) {
            std::vector<std::uint64_t> sizes;
            for (const auto& f : state.files) sizes.push_back(f.size);
            check_dali_tiling(state.records, state.num_records, sizes, state.options.index_paths,
                              state.paths, state.options.on_corrupt);
        }
    });
}

}  // namespace mpistage::tfrecord
