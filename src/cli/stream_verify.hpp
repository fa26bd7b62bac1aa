#pragma once
// What `mpistage stage --sqlite` reports: per-rank counts, padding, and the exactly-once check of
// the rows delivered (internal to the CLI).

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/stream.hpp"

namespace mpistage::cli {

/// What this rank yielded in one run.
struct StreamRun {
    std::uint64_t steps = 0;
    /// Valid item ids (= row positions in the query result).
    std::vector<std::int64_t> ids;
    /// False when the run stopped early (--stop-after-steps).
    bool finished = true;
};

/// The run of every rank (vectors indexed by rank) and the verdict.
struct StreamReport {
    std::vector<std::uint64_t> batches, valid, padding_slots, payload_bytes, oversize, sent;
    std::uint64_t rows = 0;
    /// Rows a resumed state had already delivered.
    std::uint64_t consumed_before = 0;
    std::uint64_t duplicates = 0, missing = 0, out_of_range = 0, redelivered = 0;
    bool finished = true;
    bool ok = true;
};

/// Collective: gathers every rank's counts and ids on rank 0, checks each row exactly once
/// (with `resumed`: the rows it had not delivered), writes `ids_out` (rank 0) when given, and
/// broadcasts the verdict. `rows` comes from an independent COUNT(*).
/// @throws IoError when `ids_out` cannot be written (agreed), MpiError.
StreamReport report_stream_run(const Communicator& comm, const StreamLoader& loader,
                               const StreamRun& run, std::uint64_t rows, const StreamState* resumed,
                               const std::string& ids_out);

/// Local (rank 0): prints the per-rank table, padding waste and the verdict
/// ("exactly-once: OK" or "exactly-once: FAILED (...)").
void print_stream_report(const StreamReport& r, bool verify);

}  // namespace mpistage::cli
