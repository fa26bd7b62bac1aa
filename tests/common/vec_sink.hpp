#pragma once
// A BatchSink for tests: grows per-field buffers on demand, one vector per ragged sample.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpistage/source.hpp"

namespace mpistage::test {

/// Collects fixed fields contiguously per field and ragged fields per slot.
class VecSink : public BatchSink {
public:
    explicit VecSink(const std::vector<FieldInfo>& fields) : fields_(fields) {
        fixed_.resize(fields.size());
        ragged_.resize(fields.size());
    }
    std::byte* fixed(std::size_t field, std::size_t slot) override {
        auto& v = fixed_[field];
        const std::size_t need = (slot + 1) * fields_[field].sample_bytes;
        if (v.size() < need) v.resize(need);
        return v.data() + slot * fields_[field].sample_bytes;
    }
    std::byte* ragged(std::size_t field, std::size_t slot, std::uint64_t size) override {
        auto& r = ragged_[field];
        if (r.size() <= slot) r.resize(slot + 1);
        r[slot].assign(static_cast<std::size_t>(size), std::byte{0});
        return r[slot].data();
    }
    std::vector<std::vector<std::byte>> fixed_;
    std::vector<std::vector<std::vector<std::byte>>> ragged_;

private:
    std::vector<FieldInfo> fields_;
};

}  // namespace mpistage::test
