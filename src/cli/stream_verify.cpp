// The report and exactly-once check of `mpistage stage --sqlite` (see stream_verify.hpp).
#include "cli/stream_verify.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "comm/agree.hpp"

namespace mpistage::cli {

namespace {

using ull = unsigned long long;

bool consumed_by(const StreamState* st, std::uint64_t p) {
    if (st == nullptr || st->streams.empty() || p >= st->streams[0].next) return false;
    for (const auto& r : st->streams[0].pending) {
        if (p >= r.first && p < r.second) return false;
    }
    return true;
}

// Rank 0: counts every delivered id.
void check_ids(const std::vector<std::int64_t>& ids, const StreamState* resumed, StreamReport& r) {
    std::vector<std::uint8_t> seen(r.rows, 0);
    for (auto id : ids) {
        if (id < 0 || static_cast<std::uint64_t>(id) >= r.rows) {
            ++r.out_of_range;
            continue;
        }
        const auto p = static_cast<std::uint64_t>(id);
        if (consumed_by(resumed, p)) ++r.redelivered;
        if (seen[p]++ > 0) ++r.duplicates;
    }
    std::uint64_t unique = 0;
    for (std::uint64_t p = 0; p < r.rows; ++p) {
        r.consumed_before += consumed_by(resumed, p) ? 1 : 0;
        unique += seen[p] && !consumed_by(resumed, p) ? 1 : 0;
    }
    const std::uint64_t expected = r.rows - r.consumed_before;
    r.missing = r.finished && expected > unique ? expected - unique : 0;
}

std::vector<std::int64_t> gather_on_root(const Communicator& comm,
                                         const std::vector<std::int64_t>& ids) {
    std::vector<std::string> out(static_cast<std::size_t>(comm.size()));
    out[0].resize(ids.size() * sizeof(std::int64_t));
    if (!ids.empty()) std::memcpy(out[0].data(), ids.data(), out[0].size());
    std::vector<std::int64_t> all;
    for (const auto& msg : comm.alltoallv(out)) {
        const std::size_t at = all.size();
        all.resize(at + msg.size() / sizeof(std::int64_t));
        if (!msg.empty()) std::memcpy(all.data() + at, msg.data(), msg.size());
    }
    return all;
}

}  // namespace

StreamReport report_stream_run(const Communicator& comm, const StreamLoader& loader,
                               const StreamRun& run, std::uint64_t rows, const StreamState* resumed,
                               const std::string& ids_out) {
    StreamReport r;
    r.rows = rows;
    r.finished = run.finished;
    const StreamStats& st = loader.stats();
    const auto table = comm.allgather({run.steps, run.ids.size(), st.padding_slots,
                                       st.payload_bytes, st.oversize_batches, st.items_sent});
    std::vector<std::uint64_t>* cols[] = {&r.batches,       &r.valid,    &r.padding_slots,
                                          &r.payload_bytes, &r.oversize, &r.sent};
    for (std::size_t i = 0; i < table.size(); ++i) cols[i % 6]->push_back(table[i]);
    auto all = gather_on_root(comm, run.ids);
    std::uint64_t verdict[6] = {0, 0, 0, 0, 0, 0};
    run_agreed(comm, [&] {
        if (comm.rank() != 0) return;
        check_ids(all, resumed, r);
        if (!ids_out.empty()) {
            std::sort(all.begin(), all.end());
            std::ofstream out(ids_out, std::ios::trunc);
            for (auto id : all) out << id << "\n";
            if (!out) throw IoError("stage: cannot write --ids-out file '" + ids_out + "'");
        }
        verdict[0] = r.duplicates;
        verdict[1] = r.missing;
        verdict[2] = r.out_of_range;
        verdict[3] = r.redelivered;
        verdict[4] = r.consumed_before;
    });
    const std::string text(reinterpret_cast<const char*>(verdict), sizeof verdict);
    const std::string got = comm.broadcast(text, 0);
    std::memcpy(verdict, got.data(), sizeof verdict);
    r.duplicates = verdict[0];
    r.missing = verdict[1];
    r.out_of_range = verdict[2];
    r.redelivered = verdict[3];
    r.consumed_before = verdict[4];
    const bool equal =
        std::all_of(r.batches.begin(), r.batches.end(), [&](auto b) { return b == r.batches[0]; });
    r.ok =
        equal && r.duplicates == 0 && r.missing == 0 && r.out_of_range == 0 && r.redelivered == 0;
    return r;
}

void print_stream_report(const StreamReport& r, bool verify) {
    std::uint64_t valid = 0, slots = 0, padding = 0;
    for (std::size_t k = 0; k < r.batches.size(); ++k) {
        std::printf(
            "rank %zu: %llu batches, %llu rows, %llu padding slots, %llu bytes, "
            "%llu oversize batches, %llu rows sent to other ranks\n",
            k, static_cast<ull>(r.batches[k]), static_cast<ull>(r.valid[k]),
            static_cast<ull>(r.padding_slots[k]), static_cast<ull>(r.payload_bytes[k]),
            static_cast<ull>(r.oversize[k]), static_cast<ull>(r.sent[k]));
        valid += r.valid[k];
        padding += r.padding_slots[k];
    }
    slots = valid + padding;
    std::printf(
        "steps: %llu batches per rank (%s), %llu rows delivered%s\n",
        static_cast<ull>(r.batches.empty() ? 0 : r.batches[0]),
        std::all_of(r.batches.begin(), r.batches.end(), [&](auto b) { return b == r.batches[0]; })
            ? "equal on every rank"
            : "UNEQUAL",
        static_cast<ull>(valid), r.finished ? "" : " (stopped early by --stop-after-steps)");
    std::printf("padding waste: %llu of %llu slots (%.2f%%)\n", static_cast<ull>(padding),
                static_cast<ull>(slots),
                slots ? 100.0 * static_cast<double>(padding) / static_cast<double>(slots) : 0.0);
    if (r.consumed_before > 0) {
        std::printf("resumed: %llu rows were delivered before\n",
                    static_cast<ull>(r.consumed_before));
    }
    if (!verify) return;
    if (r.ok) {
        std::printf("exactly-once: OK\n");
        return;
    }
    std::printf(
        "exactly-once: FAILED (duplicates %llu, missing %llu, out of range %llu, "
        "delivered again after resume %llu)\n",
        static_cast<ull>(r.duplicates), static_cast<ull>(r.missing),
        static_cast<ull>(r.out_of_range), static_cast<ull>(r.redelivered));
}

}  // namespace mpistage::cli
