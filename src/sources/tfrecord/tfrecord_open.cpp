// TfRecordSource open steps that find records: index-free split with its agreement, DALI index
// slices and whole gzip files (the descriptor exchange is in descriptor_window.cpp).
#include <algorithm>
#include <climits>

#include "comm/agree.hpp"
#include "index/split_agreement.hpp"
#include "mpistage/error.hpp"
#include "sources/tfrecord/dali_index.hpp"
#include "sources/tfrecord/source_state.hpp"
#include "util/input_file.hpp"
#include "util/memory_budget.hpp"

namespace mpistage::tfrecord {

namespace {

/// Decompresses and walks the gzip files whose first byte is in this rank's cut.
void index_gzip_files(const SourceState& state, const std::vector<std::uint32_t>& whole_files,
                      const ScanOptions& so, LocalRecords& local) {
    for (auto f : whole_files) {
        auto data = state.gz(f, true);
        if (data->empty()) {
            throw FormatError("tfrecord: " + state.files[f].path +
                              ": decompresses to an empty stream (no record at offset 0)");
        }
        const std::vector<ScanFile> one{
            memory_file(state.files[f].path + " (decompressed)", data->data(), data->size())};
        auto walk = walk_cut(one, 0, data->size(), so);
        for (auto& r : walk.records) {
            r.file = f;
            local.records.push_back(r);
        }
        local.skipped += walk.skipped;
        local.skipped_bytes += walk.skipped_bytes;
    }
    std::stable_sort(local.records.begin(), local.records.end(),
                     [](const RecordRef& a, const RecordRef& b) {
                         return a.file != b.file ? a.file < b.file : a.offset < b.offset;
                     });
}

/// This rank's slice of the DALI index files: parsed entries and lines per index file.
struct IndexSlice {
    std::vector<DaliEntry> entries;
    std::vector<std::uint64_t> line_counts;
};

/// Reads the lines that start in [lb, le) of index file `path` (local offsets) and parses them.
std::uint64_t parse_slice(const detail::PosixFile& file, std::uint64_t lb, std::uint64_t le,
                          std::uint32_t index, std::vector<DaliEntry>& out) {
    // Read the slice plus the byte before it (line start test) and up to the end of the last
    // line that starts inside it.
    const std::uint64_t read_from = lb > 0 ? lb - 1 : 0;
    const std::uint64_t size = file.size_bytes();
    std::string text;
    std::uint64_t to = le;
    for (;;) {
        text.resize(static_cast<std::size_t>(to - read_from));
        file.read_exact(reinterpret_cast<std::byte*>(text.data()), to - read_from, read_from,
                        "tfrecord: index");
        if (to >= size || text.back() == '\n') break;
        if (text.find('\n', static_cast<std::size_t>(le - read_from)) != std::string::npos) break;
        to = std::min(size, to + 4096);
    }
    return parse_dali_lines(text, static_cast<std::size_t>(lb - read_from),
                            static_cast<std::size_t>(le - read_from), lb == 0, index, out);
}

std::vector<detail::PosixFile> open_index_files(const std::vector<std::string>& paths) {
    std::vector<detail::PosixFile> files;
    for (const auto& p : paths) {
        detail::probe_input_file(p, "tfrecord: index");
        files.emplace_back(p);
    }
    return files;
}

IndexSlice read_index_slice(const Communicator& comm, const std::vector<detail::PosixFile>& files) {
    IndexSlice slice;
    slice.line_counts.assign(files.size(), 0);
    std::vector<std::uint64_t> istarts(files.size() + 1, 0);
    for (std::size_t i = 0; i < files.size(); ++i) {
        istarts[i + 1] = istarts[i] + files[i].size_bytes();
    }
    const std::uint64_t b = cut_begin(istarts.back(), comm.rank(), comm.size());
    const std::uint64_t e = cut_begin(istarts.back(), comm.rank() + 1, comm.size());
    for (std::size_t i = 0; i < files.size(); ++i) {
        const std::uint64_t lb = std::max(b, istarts[i]);
        const std::uint64_t le = std::min(e, istarts[i + 1]);
        if (lb >= le) continue;
        slice.line_counts[i] = parse_slice(files[i], lb - istarts[i], le - istarts[i],
                                           static_cast<std::uint32_t>(i), slice.entries);
    }
    return slice;
}

}  // namespace

LocalRecords scan_index_free(const Communicator& comm, SourceState& state) {
    ScanOptions so = state.scan_options();
    // The scan's descriptors stay within the rank's share of the node's memory (a clear error
    // on every rank, through run_agreed, instead of the OOM killer for a file of 10^9 records).
    // The node's rank count comes from the node split, made here on every rank (every rank
    // scans: the index options were agreed), once: the descriptor window uses it too.
    comm.split_node();
    so.max_descriptor_bytes = detail::memory_share_bytes(comm.node_size());
    const std::vector<ScanFile> files = state.scan_files();
    const std::uint64_t total = state.starts.back();
    const std::uint64_t my_begin = cut_begin(total, comm.rank(), comm.size());
    const std::uint64_t my_end = cut_begin(total, comm.rank() + 1, comm.size());
    CutScan scan;
    run_agreed(comm, [&] { scan = scan_cut(files, my_begin, my_end, so); });
    state.rounds = index::agree_split(
        [&] {
            const auto starts = comm.allgather(scan.start);
            const auto stops = comm.allgather(scan.stop);
            const auto broken = comm.allgather(scan.broken ? 1 : 0);
            std::vector<index::CutClaim> claims(starts.size());
            for (std::size_t r = 0; r < claims.size(); ++r) {
                claims[r] = {starts[r], stops[r], broken[r] != 0};
            }
            return claims;
        },
        [&](int m, std::uint64_t from) {
            run_agreed(comm, [&] {
                if (comm.rank() == m) scan = walk_cut(files, from, my_end, so, true);
            });
        });
    LocalRecords local;
    local.records = std::move(scan.records);
    local.skipped = scan.skipped;
    local.skipped_bytes = scan.skipped_bytes;
    run_agreed(comm, [&] { index_gzip_files(state, scan.whole_files, so, local); });
    return local;
}

LocalRecords read_dali_index(const Communicator& comm, const SourceState& state) {
    const auto& names = state.options.index_paths;
    const auto files = run_agreed_value(comm, [&] { return open_index_files(names); });
    std::vector<NamedValue> sizes;
    for (const auto& f : files)
        sizes.push_back({"size of " + f.path(), std::to_string(f.size_bytes())});
    require_same(comm, sizes, "tfrecord: ranks see different index file sizes",
                 "the index files changed while opening, or the same path names different files");
    IndexSlice slice = run_agreed_value(comm, [&] { return read_index_slice(comm, files); });
    // Line numbers: per index file, the lines before this rank's slice.
    const std::vector<std::uint64_t> line_base = comm.exscan_sum(slice.line_counts);
    for (auto& en : slice.entries) en.line += line_base[en.file] + 1;
    return run_agreed_value(comm, [&] {
        auto kept =
            validate_dali_entries(slice.entries, state.scan_files(), names, state.scan_options());
        return LocalRecords{std::move(kept.records), kept.skipped, kept.skipped_bytes};
    });
}

}  // namespace mpistage::tfrecord
