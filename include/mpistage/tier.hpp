#pragma once
/// @file
/// Where a loader's epochs are served from: the staging tier (`LoaderOptions::tier.stage`) and how
/// it takes in a shard (`LoaderOptions::tier.stage_read`); docs/architecture.md, "Memory tier".

#include <cstdint>
#include <string>

namespace mpistage {

/// Where a loader serves its epochs from (option `LoaderOptions::tier.stage`, CLI `--stage`).
enum class Stage : std::uint8_t {
    /// Every epoch reads the source (file reads; batches sorted by offset and coalesced).
    none,
    /// The dataset is staged in node memory at construction; every epoch is served from it.
    memory,
    /// `memory` when the staged shard plus the ring fit `LoaderOptions::tier.stage_budget_bytes` on
    /// every rank, `none` otherwise (the report says which and why).
    automatic,
};
/// "none", "memory" or "auto".
std::string to_string(Stage s);
/// Parses "none", "memory" or "auto". @throws ConfigError naming the accepted words.
Stage parse_stage(const std::string& s);

/// How the memory tier takes in the fixed fields of a rank's shard (option
/// `LoaderOptions::tier.stage_read`, CLI `--stage-read`; docs/architecture.md, "Memory tier").
enum class StageRead : std::uint8_t {
    /// `map` where every field can be mapped (rows back to back in a file in native order,
    /// no ragged field, one node) and the pages can be locked in memory, `copy` otherwise.
    automatic,
    /// Map the files' pages (read-only, `MAP_SHARED`), read them in and lock them in memory
    /// (`MADV_POPULATE_READ`, `mlock`): the staged shard is the page cache's copy of the
    /// file, with no copy of our own. The files must then not be truncated or rewritten in
    /// place while the loader lives (as for any reader that maps files). Where a field cannot
    /// be mapped, or the lock is refused (`RLIMIT_MEMLOCK`), a ConfigError naming why.
    map,
    /// Read the shard into a node shared-memory window (`MPI_Win_allocate_shared`).
    copy,
};
/// "auto", "map" or "copy".
std::string to_string(StageRead r);

/// The read-ahead of `Shuffle::chunks` over files (docs/shuffle.md, "Read-ahead"), this rank's,
/// over the epochs so far; zero when it did not run (another shuffle, a memory tier, ragged
/// fields, two-phase reads).
struct ReadAheadCounters {
    /// Chunks read (each in one read per field) and their bytes.
    std::uint64_t chunks_read = 0;
    std::uint64_t bytes_read = 0;
    /// The most bytes held at once, and the budget it keeps to (the stage budget per rank).
    std::uint64_t peak_resident_bytes = 0;
    std::uint64_t budget_bytes = 0;
    /// Chunks read beyond the budget because a read waited for them (a window of
    /// `window_chunks` chunks larger than the budget).
    std::uint64_t over_budget_reads = 0;
    /// Seconds the loader's reads waited for a chunk not yet in memory.
    double wait_seconds = 0;
    /// The most chunk reads in flight at once in an epoch: the I/O threads at the start, one
    /// more each time a read waited, up to 32 (an epoch starts at the depth the last reached).
    std::uint64_t readers = 0;
};

/// Parses "auto", "map" or "copy". @throws ConfigError naming the accepted words.
StageRead parse_stage_read(const std::string& s);

}  // namespace mpistage
