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

/// Samples `sampled` reads (one per stratum; plus samples 0 and N−1): its bound, whatever N is.
constexpr std::uint64_t kFingerprintStrata = 1024;

/// Pure: the sorted, distinct sample ids the `sampled` level reads for a dataset of N
/// samples: one position in each of min(N, kFingerprintStrata) equal strata of [0, N), chosen
/// by a hash of (N, stratum) so that it does not fall on a regular grid, and 0 and N−1.
std::vector<std::uint64_t> fingerprint_positions(std::uint64_t num_samples);

/// Collective over `comm`: the fingerprint of `source` at `level`, identical on every rank and
/// independent of the world size. `ends` reads samples 0, N/2 and N−1 on every rank (the
/// fingerprint of state format versions 1 and 2). The other levels divide their work among
/// the ranks by shard (`balanced_shard_begins`): each rank reads the `fingerprint_positions`
/// inside its shard and looks up their `Source::sample_bytes` (`sampled`: that is all, at
/// most kFingerprintStrata + 2 reads and size look-ups in all, whatever N is; one agreement
/// and one allgather); `sampled_v4` (versions 3 and 4) also looks up the size of every sample
/// of its shard, and `full` also hashes every byte of it: O(N/W) per rank, swept in slices of
/// at most 1 s each closed by an agreement (so a stopped rank is named by the watchdog within
/// the communicator's timeout however long the sweep takes), rank 0 printing its progress on
/// stderr every 10 s. Per-sample terms are keyed by the sample id and summed (mod 2^64), so
/// the result is the same however the ids are divided. Memory O(samples read per call).
/// @throws as `Source::read`, identical on every rank (agreed).
std::string dataset_fingerprint(const Communicator& comm, const Source& source,
                                std::uint64_t num_samples, std::uint64_t skipped_records,
                                FingerprintLevel level);

}  // namespace mpistage::detail
