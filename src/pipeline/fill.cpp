#include "pipeline/fill.hpp"

#include <cstring>

#include "mpistage/error.hpp"
#include "pipeline/slot_sink.hpp"

namespace mpistage::detail {

namespace {

/// Copies the step's ids and mask into the slot and lists the positions to read.
void prepare(Slot& slot, const std::vector<FieldInfo>& fields, const EpochPlan& plan,
             std::uint64_t step) {
    const std::size_t b = plan.batch_slots(step);
    const std::uint64_t first = plan.batch_begin(step);
    slot.step = step;
    slot.size = b;
    slot.num_valid = 0;
    slot.bytes = 0;
    slot.read_ids.clear();
    slot.read_pos.clear();
    for (std::size_t j = 0; j < b; ++j) {
        const std::int64_t id = plan.slot_id(first + j);
        const bool valid = plan.slot_valid(first + j);
        slot.ids[j] = id;
        slot.valid[j] = valid ? 1 : 0;
        slot.num_valid += valid ? 1 : 0;
        if (id >= 0) {
            slot.read_ids.push_back(static_cast<std::uint64_t>(id));
            slot.read_pos.push_back(j);
            continue;
        }
        for (std::size_t f = 0; f < fields.size(); ++f) {
            if (!fields[f].ragged) {
                std::memset(slot.field_data[f] + j * fields[f].sample_bytes, 0,
                            fields[f].sample_bytes);
            }
        }
    }
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].ragged) slot.ragged_values[f].clear();
    }
}

}  // namespace

void fill_slot(Slot& slot, const Source& source, const EpochPlan& plan, std::uint64_t step,
               const Source* fallback) {
    const auto from = [&](const Source& s) {
        fill_slot_with(slot, s.fields(), plan, step,
                       [&s](const std::uint64_t* ids, std::size_t count, BatchSink& sink) {
                           s.read(ids, count, sink);
                       });
    };
    if (!fallback) return from(source);
    try {
        from(source);
    } catch (const StagedFileChanged&) {
        throw;  // the file holds other bytes than were staged: not a promise the file can keep
    } catch (...) {
        // The promise of the memory tier's reads is kept from the file (prepare() clears what
        // the failed read wrote); only if that fails too is the step's read a failure.
        from(*fallback);
    }
}

void fill_slot_with(Slot& slot, const std::vector<FieldInfo>& fields, const EpochPlan& plan,
                    std::uint64_t step, const SampleReader& read) {
    const std::size_t b = plan.batch_slots(step);
    if (b > slot.capacity) {  // the loader sizes its ring from the plan's largest batch
        throw Error("loader: batch " + std::to_string(step) + " has " + std::to_string(b) +
                    " slots but the ring's slots hold " + std::to_string(slot.capacity));
    }
    prepare(slot, fields, plan, step);
    bool any_ragged = false;
    for (const auto& f : fields) any_ragged = any_ragged || f.ragged;
    std::vector<std::uint64_t> lengths(any_ragged ? fields.size() * b : 0, 0);
    SlotSink sink(slot, fields, lengths, b);
    read(slot.read_ids.data(), slot.read_ids.size(), sink);
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].ragged) {
            auto& off = slot.ragged_offsets[f];
            off.assign(b + 1, 0);
            for (std::size_t j = 0; j < b; ++j) {
                off[j + 1] = off[j] + static_cast<std::int64_t>(lengths[f * b + j]);
            }
            slot.bytes += static_cast<std::uint64_t>(off[b]);
        } else {
            slot.bytes += fields[f].sample_bytes * slot.read_ids.size();
        }
    }
}

}  // namespace mpistage::detail
