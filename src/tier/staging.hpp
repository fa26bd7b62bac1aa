#pragma once
// Reading one rank's shard into the memory tier: fixed fields straight into the node segment,
// ragged fields (TFRecord payloads, decoded Example features) into private blocks first, as
// their sizes are known only once read (internal).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"
#include "tier/memory_tier.hpp"

namespace mpistage::detail {

/// Ragged values of one shard, held privately until the ragged segment is allocated.
struct RaggedStaging {
    struct Field {
        std::vector<std::vector<std::byte>> blocks;  ///< values in sample order
        std::vector<std::uint64_t> lengths;          ///< bytes of each sample of the shard
        std::uint64_t total_bytes = 0;
    };
    std::vector<Field> fields;  ///< indexed like the source's fields (empty for fixed ones)

    RaggedStaging(const std::vector<FieldInfo>& infos, std::uint64_t count);
    /// Room for `size_bytes` of sample `slot` of ragged field `field`. Pointers stay valid.
    std::byte* append(std::size_t field, std::uint64_t slot, std::uint64_t size_bytes);
};

/// Byte layouts of the fixed fields of every rank's shard `[begins[r], begins[r+1])`
/// (each field block 64-byte aligned). Pure.
std::vector<ShardLayout> fixed_layouts(const std::vector<FieldInfo>& fields,
                                       const std::vector<std::uint64_t>& begins);

/// Collective over `comm`: reads the shard `layout` of `source` (fixed fields to
/// `fixed_base`, ragged fields to `ragged`): collective H5Dread (MPI-IO collective reads) for
/// an HDF5 source opened on the same ranks whose rows cannot be read without MPI (chunked or
/// compressed datasets), else the source's `read` over consecutive ids in pieces of at most
/// 1 GiB, which the sources coalesce into large independent reads of this rank's contiguous
/// byte range (pread for contiguous HDF5 datasets and raw/IDX files). Then every rank checks
/// that the source's files are the ones it opened (`Source::check_unchanged`: a file
/// truncated during the read fails here, not as zeros served later). Failures are agreed.
/// @returns "collective" or "independent" (the same on every rank).
/// @throws the source's errors, identically on every rank.
std::string read_shard(const Communicator& comm, const Source& source, const ShardLayout& layout,
                       std::byte* fixed_base, RaggedStaging& ragged);

/// Local: writes the value offsets and the values of `ragged` into the ragged segment at
/// `base` per `layout`, freeing each private block once copied.
void copy_ragged(const std::vector<FieldInfo>& fields, const ShardLayout& layout,
                 RaggedStaging& ragged, std::byte* base);

}  // namespace mpistage::detail
