#pragma once
/// @file
/// The loader's resumable state: a handful of integers that, with the dataset and the options,
/// determine the rest of the sample sequence (docs/resume.md).

#include <cstdint>
#include <string>

#include "mpistage/plan.hpp"

namespace mpistage {

/// Where a job stands in its sample sequence, identical on every rank. Taken with
/// `Loader::state()` (not collective, no I/O) and continued with `Loader::restore`. Serialises
/// to a JSON object of about 400 bytes (`to_json`). Plain value type; thread safety as `int`.
///
/// With `global` sharding the samples consumed in an epoch are exactly the first
/// `samples_consumed` positions of the epoch order (a function of dataset, seed and epoch, not
/// of W), so a job can resume at any world size. With `byte_range` sharding the shards depend
/// on W, and the state resumes only at the same world size.
struct LoaderState {
    /// Version of this layout; `from_json` also reads version 1 (fixed batches only, no
    /// budget keys) and refuses others.
    static constexpr int kFormatVersion = 2;

    int format_version = kFormatVersion;
    /// Identity of the dataset independent of paths (so staged copies resume): FNV-1a 64 (hex)
    /// over N, the fields (name, dtype, shape, ragged), the skipped-record count and the bytes
    /// of samples 0, N/2 and N−1.
    std::string dataset_fingerprint;
    /// N of the dataset.
    std::uint64_t num_samples = 0;
    /// Records the source dropped as corrupt (`SourceStatistic` "skipped_records"), which
    /// shift every later id: a different count is a different dataset.
    std::uint64_t skipped_records = 0;
    /// The options that decide the sequence (batch size, seed, sharding, shuffle, remainder,
    /// balance_steps, the batch budget).
    PlanOptions plan;
    /// World size of the job that saved the state.
    int world_size = 1;
    /// Epoch to continue (`Loader::epoch(state.epoch)` is the first call after restore).
    std::uint64_t epoch = 0;
    /// Batches every rank has yielded in `epoch` (counting batches of earlier runs at the same
    /// world size; after a resume at another W, the steps of the runs at each W are summed).
    std::uint64_t steps_consumed = 0;
    /// Samples of `epoch` consumed by the whole job: with `global` sharding the resume
    /// position in the epoch order (≤ N; with a batch budget, in the batch order: the samples
    /// of the consumed prefix of the epoch's W-independent batch list); with `byte_range`,
    /// the valid samples yielded by all ranks (a report; the resume point is
    /// `steps_consumed`).
    std::uint64_t samples_consumed = 0;

    /// The state as one JSON object (nlohmann-json; keys documented in docs/resume.md).
    std::string to_json() const;
    /// Parses `to_json`'s output. `origin` (e.g. the file name) is named in errors.
    /// @throws ConfigError for malformed JSON, missing or mistyped keys, unknown option names,
    ///         or another format version.
    static LoaderState from_json(const std::string& text, const std::string& origin);

    bool operator==(const LoaderState& o) const;
    bool operator!=(const LoaderState& o) const { return !(*this == o); }
};

}  // namespace mpistage
