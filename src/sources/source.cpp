#include "mpistage/source.hpp"

namespace mpistage {

namespace {
__extension__ typedef unsigned __int128 u128;  // T·r can exceed 64 bits
}  // namespace

std::uint64_t fixed_records_in_cut(std::uint64_t num_records, std::uint64_t record_bytes, int rank,
                                   int world_size) {
    if (num_records == 0 || world_size < 1 || rank < 0 || rank >= world_size) return 0;
    if (record_bytes == 0) record_bytes = 1;
    const u128 total = static_cast<u128>(num_records) * record_bytes;
    const auto w = static_cast<u128>(world_size);
    const u128 begin = total * static_cast<unsigned>(rank) / w;
    const u128 end = total * static_cast<unsigned>(rank + 1) / w;
    // Records starting at or after byte x: indices >= ceil(x / record_bytes).
    auto first_at_or_after = [&](u128 x) {
        return static_cast<std::uint64_t>((x + record_bytes - 1) / record_bytes);
    };
    return first_at_or_after(end) - first_at_or_after(begin);
}

}  // namespace mpistage
