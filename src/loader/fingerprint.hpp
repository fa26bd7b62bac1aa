#pragma once
// The dataset fingerprint of a LoaderState at each FingerprintLevel (docs/resume.md,
// "Fingerprint levels"): what a restore compares to know the data is the data the state was
// saved over.

#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"
#include "mpistage/state.hpp"

namespace mpistage::detail {

/// Samples `sampled` reads (one per stratum; plus samples 0 and N−1).
constexpr std::uint64_t kFingerprintStrata = 1024;

/// Pure: the sorted, distinct sample ids the `sampled` level reads for a dataset of N
/// samples: one position in each of min(N, kFingerprintStrata) equal strata of [0, N), chosen
/// by a hash of (N, stratum) so that it does not fall on a regular grid, and 0 and N−1.
std::vector<std::uint64_t> fingerprint_positions(std::uint64_t num_samples);

/// Collective over `comm` (one allgather after an agreement on the reads): the fingerprint of
/// `source` at `level`, identical on every rank and independent of the world size. `ends`
/// reads samples 0, N/2 and N−1 on every rank (the fingerprint of state format versions 1 and
/// 2); `sampled` and `full` divide their reads among the ranks by shard
/// (`balanced_shard_begins`): each rank reads the `fingerprint_positions` inside its shard
/// and looks up `Source::sample_bytes` of every sample of it; `full` also hashes every
/// sample of its shard. Per-sample terms are keyed by the sample id and summed (mod 2^64),
/// so the result is the same however the ids are divided. Memory O(samples read per call).
/// @throws as `Source::read`, identical on every rank (agreed).
std::string dataset_fingerprint(const Communicator& comm, const Source& source,
                                std::uint64_t num_samples, std::uint64_t skipped_records,
                                FingerprintLevel level);

}  // namespace mpistage::detail
