#include "loader/batch_builder.hpp"

#include <string>
#include <utility>

namespace mpistage::detail {

namespace {

/// One field of a batch of `slots` slots; checks the sizes the field's layout implies.
HostField make_field(const FieldInfo& info, std::size_t slots, const std::byte* data,
                     std::uint64_t size_bytes, const std::vector<std::int64_t>* offsets) {
    HostField f;
    f.info = &info;
    f.data = data;
    f.size_bytes = size_bytes;
    if (info.ragged) {
        if (!offsets || offsets->size() != slots + 1 ||
            static_cast<std::uint64_t>(offsets->back()) != size_bytes) {
            throw Error("batch builder: ragged field '" + info.name + "' needs " +
                        std::to_string(slots + 1) + " offsets ending at its " +
                        std::to_string(size_bytes) + " bytes");
        }
        f.offsets = offsets->data();
    } else if (size_bytes != info.sample_bytes * slots) {
        throw Error("batch builder: field '" + info.name + "' holds " + std::to_string(size_bytes) +
                    " bytes for " + std::to_string(slots) + " slots of " +
                    std::to_string(info.sample_bytes) + " bytes");
    }
    return f;
}

}  // namespace

HostBatch batch_from_slot(const std::vector<FieldInfo>& fields, const Slot& slot,
                          std::uint64_t epoch, std::uint64_t step, std::shared_ptr<void> lease) {
    std::vector<HostField> out;
    out.reserve(fields.size());
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].ragged) {
            out.push_back(make_field(fields[f], slot.size, slot.ragged_values[f].data(),
                                     slot.ragged_values[f].size(), &slot.ragged_offsets[f]));
        } else {
            out.push_back(make_field(fields[f], slot.size, slot.field_data[f],
                                     fields[f].sample_bytes * slot.size, nullptr));
        }
    }
    return HostBatch(epoch, step, slot.size, slot.ids, slot.valid, slot.num_valid, std::move(out),
                     std::move(lease));
}

HostBatch batch_from_store(const std::vector<FieldInfo>& fields, std::shared_ptr<BatchStore> store,
                           std::uint64_t epoch, std::uint64_t step, std::size_t num_valid) {
    const std::size_t slots = store->index.size();
    if (store->valid.size() != slots || store->data.size() != fields.size() ||
        store->offsets.size() != fields.size()) {
        throw Error("batch builder: a batch store of " + std::to_string(slots) +
                    " slots does not match the " + std::to_string(fields.size()) + " fields");
    }
    std::vector<HostField> out;
    out.reserve(fields.size());
    for (std::size_t f = 0; f < fields.size(); ++f) {
        out.push_back(make_field(fields[f], slots, store->data[f].data(), store->data[f].size(),
                                 fields[f].ragged ? &store->offsets[f] : nullptr));
    }
    const std::int64_t* index = store->index.data();
    const std::uint8_t* valid = store->valid.data();
    return HostBatch(epoch, step, slots, index, valid, num_valid, std::move(out), std::move(store));
}

}  // namespace mpistage::detail
