#pragma once
/// @file
/// The loader's resumable state: a handful of integers that, with the dataset and the options,
/// determine the rest of the sample sequence (docs/resume.md).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mpistage/plan.hpp"

namespace mpistage {

/// How much of the dataset `LoaderState::dataset_fingerprint` covers (docs/resume.md,
/// "Fingerprint levels"): what each level catches, what it can miss, and what it costs.
/// Option `LoaderOptions::safety.fingerprint`, CLI `--fingerprint`. Every level covers the
/// metadata: N, the fields (name, dtype, shape, ragged) and the skipped-record count.
enum class FingerprintLevel : std::uint8_t {
    /// Samples 0, N/2 and N−1 only: the fingerprint of states of format versions 1 and 2,
    /// still checked when such a state is restored. Not accepted as an option.
    ends,
    /// The `sampled` level of format versions 3 and 4: `sampled`'s samples plus the stored
    /// size (`Source::sample_bytes`) of every sample, O(N/W) size look-ups per rank (swept
    /// like `full`, with progress, under the watchdog). Still checked when such a state is
    /// restored; not accepted as an option.
    sampled_v4,
    /// The default: the metadata plus the bytes and the stored size (`Source::sample_bytes`)
    /// of a bounded sample: one sample at a position fixed by N in each of
    /// min(N, kFingerprintStrata = 1024) equal strata of [0, N), and samples 0 and N−1. Reads
    /// and sizes at most 1026 samples in all, divided among the ranks: the cost does not
    /// depend on N. Catches another N, field, dtype, shape or skipped count, and any edit
    /// (bytes or length) of a sampled row, so rows moved, permuted or inserted with N kept
    /// almost surely; misses an edit of a sample it does not read (a flipped byte, a record
    /// rewritten, with its length or not) when N > 1024.
    sampled,
    /// `sampled`'s samples plus the stored size and a content hash of every byte of every
    /// sample (XXH3 64 per sample keyed by its id, summed, so the result does not depend on
    /// W). Catches any edit anywhere (not edits made to collide on purpose: a fast hash, not a
    /// cryptographic one). Reads the whole dataset once at construction, divided among the
    /// ranks: O(N/W) per rank, in slices under the watchdog, rank 0 reporting its progress on
    /// stderr every 10 s.
    full,
};
/// "ends", "sampled_v4", "sampled" or "full".
std::string to_string(FingerprintLevel level);
/// Parses "sampled" or "full" (and the levels of older saved states, "ends" and "sampled_v4",
/// when `allow_legacy`, for saved states).
/// @throws ConfigError naming the accepted words.
FingerprintLevel parse_fingerprint_level(const std::string& s, bool allow_legacy = false);

/// Largest world size a saved state is accepted from (bounds every per-rank computation a
/// restore derives from the state's `world_size`).
constexpr int kMaxStateWorldSize = 1 << 24;

/// What a loader reads: files (a `Source`, samples by id) or streams (a `StreamSource`).
enum class LoaderInput : std::uint8_t { files, stream };

/// Position of one sub-stream in a stream loader's state: positions below `next` were consumed,
/// except those inside `pending` ranges ([begin, end) pairs, ascending), which are still to come.
struct StreamPosition {
    std::uint64_t next = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> pending;
};

/// Where a job stands in its sample sequence, identical on every rank. Taken with
/// `Loader::state()` (not collective, no I/O) and continued with `Loader::restore`. Serialises
/// to a JSON object of about 400 bytes (`to_json`). Plain value type; thread safety as `int`.
///
/// With `global` sharding the samples consumed in an epoch are exactly the first
/// `samples_consumed` positions of the epoch order (a function of dataset, seed and epoch, not
/// of W), so a job can resume at any world size. With `byte_range` sharding the shards depend
/// on W, and the state resumes only at the same world size.
///
/// A loader over streams (`input == LoaderInput::stream`) stands at per-stream positions
/// (`streams`) instead: `dataset_fingerprint` is then the hash of the stream source's
/// fingerprint, fields, stream count and the options that decide who owns what
/// (`StreamPlanOptions` sharding, chunk size, hash reading), `steps_consumed` the steps every
/// rank yielded in `epoch`, `samples_consumed` the valid samples all ranks yielded in it, and
/// the file keys (N, plan, digest, fingerprint level, run start) are not used. Such a state
/// resumes at any world size.
struct LoaderState {
    /// Version of this layout. `from_json` also reads versions 1 (fixed batches only, no
    /// budget keys), 2 (no fingerprint level, no run start), 3 (no consumed-id digest) and 4
    /// (the `sampled` fingerprint covered every sample's size): the fingerprint of versions 1
    /// and 2 is of level `ends`, a `sampled` fingerprint of versions 3 and 4 is of level
    /// `sampled_v4` (both checked as such on restore), their run start is taken as the state
    /// itself, and states of versions 1 to 3 have no `consumed_digest` to check (a restore
    /// computes it and keeps it in the state it continues from). Other versions are refused.
    static constexpr int kFormatVersion = 5;
    int format_version = kFormatVersion;
    /// Identity of the dataset independent of paths (so staged copies resume), at
    /// `fingerprint_level`: 16 hex digits (FNV-1a 64 for `ends`, XXH3 64 otherwise).
    std::string dataset_fingerprint;
    /// What `dataset_fingerprint` covers; a restore recomputes it at this level.
    FingerprintLevel fingerprint_level = FingerprintLevel::sampled;
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
    /// `Shuffle::chunks`: the world size `epoch`'s order was made for (the world size of the
    /// run that began the epoch; `EpochStart::order_world_size`), kept through resumes at
    /// other world sizes; 0 for the other shuffles. JSON key `order_world_size`, written (with
    /// `chunk_samples` and `window_chunks`) only for `chunks`.
    int order_world_size = 0;
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
    /// `steps_consumed` and `samples_consumed` where the run that saved this state began in
    /// `epoch` (0 and 0 when it began the epoch; a restored run begins at its state's point).
    /// The run's steps were all made at `world_size`, which makes `samples_consumed` a
    /// function of `steps_consumed` that a restore checks (docs/resume.md, "Validation").
    std::uint64_t run_start_steps = 0;
    std::uint64_t run_start_samples = 0;
    /// Digest of the sample ids consumed in `epoch` (16 hex digits): a hash of the epoch plus
    /// the sum (mod 2^64) of a 64-bit hash of each consumed id, keyed by the epoch, so it
    /// depends on the set of ids (not on their order or on W). `state()` sums what the ranks
    /// were planned (each its own ids; one allreduce per 1024 steps); `restore` recomputes it
    /// from the plan the other keys imply (epoch, seed, steps, samples, world size, options)
    /// and refuses a state whose digest differs (docs/resume.md, "Consumed-id digest"). Empty
    /// for states read from format versions 1 to 3 (or built by hand), which are not checked
    /// this way.
    std::string consumed_digest;
    /// Files or streams: which keys hold the state (see above).
    LoaderInput input = LoaderInput::files;
    /// Streams: one position per sub-stream (empty for files).
    std::vector<StreamPosition> streams;

    /// The state as one JSON object (nlohmann-json; keys documented in docs/resume.md). A
    /// state without `consumed_digest` is written in the layout of version 3.
    std::string to_json() const;
    /// Parses `to_json`'s output. `origin` (e.g. the file name) is named in errors. Checks
    /// what the state alone decides: JSON types (an unsigned key must be a non-negative
    /// integer that fits 64 bits: never a wrap-around), `consumed_digest` of 16 lowercase
    /// hex digits (from version 4), `world_size` in
    /// [1, kMaxStateWorldSize], the plan options (`PlanOptions::validate`), N ≥ 1,
    /// `samples_consumed` ≤ N, the run start not after the state, and no steps without
    /// samples or samples without steps. What needs the dataset and the options is checked by
    /// `Loader::restore`. A stream state (`"input": "stream"`) holds the stream keys only
    /// (fingerprint, epoch, steps, samples, world size, streams: each position a non-negative
    /// integer, `pending` of [first, end] pairs).
    /// @throws ConfigError naming the key, its value and the accepted range, for malformed
    ///         JSON, missing or mistyped keys, unknown option names, values out of range, or
    ///         another format version.
    static LoaderState from_json(const std::string& text, const std::string& origin);

    bool operator==(const LoaderState& o) const;
    bool operator!=(const LoaderState& o) const { return !(*this == o); }
};

}  // namespace mpistage
