#pragma once
// A BatchSink that writes a source's samples into a ring slot, mapping read order to batch
// positions (padding positions are never read).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpistage/source.hpp"
#include "pipeline/ring.hpp"

namespace mpistage::detail {

class SlotSink final : public BatchSink {
public:
    /// `lengths` receives the byte length of each ragged value at [field × stride + position].
    SlotSink(Slot& slot, const std::vector<FieldInfo>& fields, std::vector<std::uint64_t>& lengths,
             std::size_t stride)
        : slot_(slot), fields_(fields), lengths_(lengths), stride_(stride) {}
    std::byte* fixed(std::size_t field, std::size_t k) override {
        return slot_.field_data[field] + slot_.read_pos[k] * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t field, std::size_t k, std::uint64_t size_bytes) override {
        auto& values = slot_.ragged_values[field];
        const std::size_t at = values.size();
        values.resize(at + size_bytes);
        lengths_[field * stride_ + slot_.read_pos[k]] = size_bytes;
        return values.data() + at;
    }

private:
    Slot& slot_;
    const std::vector<FieldInfo>& fields_;
    std::vector<std::uint64_t>& lengths_;
    std::size_t stride_ = 0;
};

}  // namespace mpistage::detail
