#pragma once
// Refusing up front what would not fit in memory: bookkeeping whose size follows from N (the
// TFRecord descriptors, the --verify bitmap) is checked against this rank's share of the node's
// memory before it is allocated, so a dataset too large for it gives an error naming the
// file and the bytes, not `std::bad_alloc` (internal).

#include <cstdint>
#include <string>

namespace mpistage::detail {

/// This rank's share of the node's memory for bookkeeping: half the physical memory divided
/// among `ranks_on_node` ranks (as the prefetch ring's budget); 0 when unknown.
std::uint64_t memory_share_bytes(int ranks_on_node) noexcept;

/// Not collective: throws ConfigError "<what> needs B bytes on each rank ...; <advice>" when
/// `bytes` exceed `memory_share_bytes(ranks_on_node)`. Callers agree on the outcome (the inputs
/// are equal on every rank of a node, so every rank decides the same).
void check_memory_share(std::uint64_t bytes, int ranks_on_node, const std::string& what,
                        const std::string& advice);

/// `a × b`, saturated at 2^64 − 1 (sizes of huge N never wrap). Pure.
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) noexcept;

/// This process's resident set size in bytes (VmRSS of /proc/self/status), 0 when unknown.
std::uint64_t resident_bytes() noexcept;

}  // namespace mpistage::detail
