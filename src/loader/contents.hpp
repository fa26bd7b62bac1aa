#pragma once
// Content fingerprint of the dataset across ranks: the same path may name different files on
// different nodes, which metadata (shapes, sizes) does not reveal.

#include <cstdint>
#include <vector>

#include "comm/agree.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"

namespace mpistage::detail {

/// FNV-1a 64 of each sample's bytes (all fields), in the order of `ids`. Not collective;
/// reads through `source.read`. @throws as `Source::read`.
std::vector<std::uint64_t> sample_hashes(const Source& source,
                                         const std::vector<std::uint64_t>& ids);

/// XXH3 64 (xxHash) of each sample, in the order of `ids`: for every field its size in bytes
/// (8 bytes, little-endian) and then its bytes, so moving bytes between fields changes it.
/// Not collective; reads through `source.read`. @throws as `Source::read`.
std::vector<std::uint64_t> sample_xxh3(const Source& source, const std::vector<std::uint64_t>& ids);

/// Collective: every rank hashes the first and last sample of its own shard and of its
/// neighbour's shard (rank + 1 mod W; shards as `balanced_shard_begins`), so every shard
/// boundary is read by two ranks, and the hashes are all-gathered and compared. With `full`,
/// every sample of both shards is hashed as well (reads about twice the dataset in all).
/// Reads through `source.read` (independent). @throws ConfigError, identical on every rank,
/// naming the ranks and the sample ids (or shard ranges) whose contents differ; a read error
/// on any rank is agreed first (`agree_or_throw`).
void check_same_contents(const Communicator& comm, const Source& source, std::uint64_t num_samples,
                         bool full);

}  // namespace mpistage::detail
