#pragma once
// The parts of a loader batch in the order they are staged: every field (a ragged field as
// its uint8 values and int64 offsets "<field>.offsets"), then the index and the valid mask.
// Header-only and used by the loader-facing code (mpistage::torch, the CLI); it includes
// loader.hpp, so it is not among the MPI-free stage target's sources.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpistage/loader.hpp"
#include "stage/device_stager.hpp"

namespace mpistage::detail {

/// One contiguous piece of a batch and its tensor shape.
struct BatchPart {
    std::string name;
    HostSpan span;
    std::vector<std::int64_t> sizes;
    DType dtype = DType::uint8;
};

/// The parts of `batch` (fields, then "index" int64 [B] and "valid" bool [B]).
inline std::vector<BatchPart> batch_parts(const HostBatch& batch) {
    std::vector<BatchPart> parts;
    const auto b = static_cast<std::int64_t>(batch.size());
    const auto bytes = [](std::uint64_t n) { return static_cast<std::size_t>(n); };
    for (const HostField& f : batch.fields()) {
        if (f.info->ragged) {
            parts.push_back({f.info->name,
                             {f.data, bytes(f.size_bytes)},
                             {static_cast<std::int64_t>(f.size_bytes)},
                             DType::uint8});
            parts.push_back({f.info->name + ".offsets",
                             {f.offsets, bytes((batch.size() + 1) * sizeof(std::int64_t))},
                             {b + 1},
                             DType::int64});
            continue;
        }
        std::vector<std::int64_t> sizes{b};
        sizes.insert(sizes.end(), f.info->sample_shape.begin(), f.info->sample_shape.end());
        parts.push_back({f.info->name, {f.data, bytes(f.size_bytes)}, sizes, f.info->dtype});
    }
    parts.push_back(
        {"index", {batch.index(), bytes(batch.size() * sizeof(std::int64_t))}, {b}, DType::int64});
    parts.push_back({"valid", {batch.valid(), batch.size()}, {b}, DType::boolean});
    return parts;
}

/// The spans of `parts`, in order (what a DeviceStager copies).
inline std::vector<HostSpan> part_spans(const std::vector<BatchPart>& parts) {
    std::vector<HostSpan> spans;
    spans.reserve(parts.size());
    for (const BatchPart& p : parts) spans.push_back(p.span);
    return spans;
}

}  // namespace mpistage::detail
