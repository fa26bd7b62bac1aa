#pragma once
// Helpers shared by the TfRecordSource MPI tests: collective checks (exactly once, agreed
// errors), a shared temp dir, and file I/O.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "temp_dirs.hpp"
#include "vec_sink.hpp"

namespace mpistage::tfrecord_test {

using test::VecSink;

inline std::vector<std::pair<std::uint64_t, std::uint64_t>> read_idx(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("test data missing: cannot open " + path);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> lines;
    std::uint64_t o = 0, s = 0;
    while (in >> o >> s) lines.emplace_back(o, s);
    if (lines.empty()) throw std::runtime_error("test data: no index lines in " + path);
    return lines;
}

/// Plans one epoch at the current world size (mask remainder), reads every valid slot of this
/// rank, and checks across ranks that every id was staged exactly once.
inline void expect_exactly_once(const Communicator& comm, const TfRecordSource& src,
                                std::uint64_t batch_size) {
    const std::uint64_t n = src.num_samples();
    PlanOptions po;
    po.batch_size = batch_size;
    po.remainder = Remainder::mask;
    const auto plan = plan_epoch(n, comm.size(), comm.rank(), po, 0);
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    LocalStatus status;
    try {
        for (std::uint64_t step = 0; step < plan.steps; ++step) {
            std::vector<std::uint64_t> ids;
            for (std::uint64_t s = 0; s < plan.batch_size; ++s) {
                const std::size_t k = static_cast<std::size_t>(step * plan.batch_size + s);
                if (plan.valid[k] && plan.ids[k] >= 0)
                    ids.push_back(static_cast<std::uint64_t>(plan.ids[k]));
            }
            VecSink sink(src.fields());
            src.read(ids.data(), ids.size(), sink);
            for (std::size_t k = 0; k < ids.size(); ++k) {
                ++seen[static_cast<std::size_t>(ids[k])];
                if (src.fields()[0].ragged) {
                    EXPECT_EQ(sink.ragged_[0][k].size(), src.record(ids[k]).length);
                }
            }
        }
    } catch (...) {
        status = LocalStatus::from_current_exception();
    }
    EXPECT_FALSE(status.failed) << status.message;
    std::vector<int> total(seen.size(), 0);
    MPI_Allreduce(seen.data(), total.data(), static_cast<int>(seen.size()), MPI_INT, MPI_SUM,
                  comm.get());
    std::size_t wrong = 0;
    for (int t : total) wrong += t != 1 ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "ids not staged exactly once";
    std::uint64_t cut_sum = 0;
    for (int r = 0; r < comm.size(); ++r) cut_sum += src.records_in_cut(r, comm.size());
    EXPECT_EQ(cut_sum, n);
}

/// Runs `open` on every rank; expects every rank to throw an mpistage::Error of `kind` whose
/// message contains each of `needles`, and the same message on every rank.
template <class Fn>
void expect_agreed_error(const Communicator& comm, Fn open, ErrorKind kind,
                         const std::vector<std::string>& needles) {
    std::string msg;
    ErrorKind got = ErrorKind::generic;
    bool threw = false;
    try {
        open();
    } catch (const Error& e) {
        threw = true;
        msg = e.what();
        got = e.kind();
    }
    EXPECT_TRUE(threw);
    EXPECT_EQ(static_cast<int>(got), static_cast<int>(kind)) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    const std::uint64_t h = fnv1a64(msg);
    EXPECT_EQ(comm.allreduce_min(h), comm.allreduce_max(h)) << "ranks disagree: " << msg;
}

/// A temp dir chosen on rank 0 and shared; rank 0 removes it when the process exits.
inline std::string shared_tmp_dir(const Communicator& comm) {
    std::string dir;
    if (comm.rank() == 0) {
        char tmpl[] = "/tmp/mpistage_tfr_XXXXXX";
        const char* d = mkdtemp(tmpl);
        dir = d != nullptr ? d : "/tmp";
        if (d != nullptr) mpistage_test::remove_at_exit(dir);
    }
    return comm.broadcast(dir, 0);
}

inline std::vector<std::uint8_t> slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void spit(const std::string& path, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
}

}  // namespace mpistage::tfrecord_test
