#include "pipeline/ring.hpp"

#include "mpistage/dtype.hpp"
#include "mpistage/error.hpp"

namespace mpistage::detail {

namespace {

std::uint64_t aligned64(std::uint64_t n) {
    return (n + 63) / 64 * 64;
}

}  // namespace

void Ring::release(Slot* s) {
    {
        std::lock_guard<std::mutex> lk(m);
        free.push_back(s);
    }
    cv.notify_all();
}

void Ring::wait_while_lent(std::unique_lock<std::mutex>& lk, const std::function<bool()>& done) {
    constexpr auto kPoll = std::chrono::milliseconds(100);
    const auto start = std::chrono::steady_clock::now();
    while (!done()) {
        if (copying == 0 || !copy_check) {
            cv.wait(lk);  // nothing lent to a copy: what is awaited needs no device
            continue;
        }
        cv.wait_for(lk, kPoll);
        if (done() || copying == 0) continue;
        lk.unlock();
        try {
            copy_check();  // the copy stream's error, if it failed
        } catch (...) {
            lk.lock();
            throw;
        }
        lk.lock();
        if (copy_timeout.count() > 0 && copying > 0 && !done() &&
            std::chrono::steady_clock::now() - start > copy_timeout) {
            throw CudaError("loader: " + std::to_string(copying) +
                            " ring slots lent to host-to-device copies did not come back within " +
                            std::to_string(copy_timeout.count()) +
                            " s (the timeout): their copies never completed (a device that "
                            "stopped, or a CUDA error the stream did not report)");
        }
    }
}

Slot* Ring::try_take() {
    std::unique_lock<std::mutex> lk(m);
    // A slot lent to an asynchronous copy comes back by itself: wait for it, not for the caller.
    wait_while_lent(lk, [&] { return !free.empty() || copying == 0; });
    if (free.empty()) return nullptr;
    Slot* s = free.front();
    free.pop_front();
    return s;
}

Slot* Ring::take_if_free() {
    std::lock_guard<std::mutex> lk(m);
    if (free.empty()) return nullptr;
    Slot* s = free.front();
    free.pop_front();
    return s;
}

void Ring::lend_to_copy() {
    std::lock_guard<std::mutex> lk(m);
    ++copying;
}

void Ring::release_copied(Slot* s) {
    {
        std::lock_guard<std::mutex> lk(m);
        --copying;
        free.push_back(s);
    }
    cv.notify_all();
}

std::uint64_t slot_bytes(const std::vector<FieldInfo>& fields, std::uint64_t b) {
    std::uint64_t fixed_bytes = 0;
    for (const auto& f : fields) {
        if (f.ragged) continue;
        fixed_bytes +=
            aligned64(checked_mul(f.sample_bytes, b, "loader: batch of field '" + f.name + "'"));
    }
    return fixed_bytes + checked_mul(b, sizeof(std::int64_t) + 1, "loader: batch");
}

std::uint64_t ring_bytes(const Ring& ring) {
    std::uint64_t bytes = 0;
    for (const auto& slot : ring.slots) bytes += slot->block.size_bytes();
    return bytes;
}

std::shared_ptr<Ring> make_ring(const std::vector<FieldInfo>& fields, std::uint64_t b,
                                std::uint64_t count, bool pinned) {
    const std::uint64_t bytes = slot_bytes(fields, b);
    auto ring = std::make_shared<Ring>();
    ring->batch_capacity = b;
    for (std::uint64_t i = 0; i < count; ++i) {
        auto slot = std::make_unique<Slot>();
        slot->block = HostBlock(bytes, pinned);
        slot->capacity = b;
        std::byte* p = slot->block.data();
        for (const auto& f : fields) {
            if (f.ragged) {
                slot->field_data.push_back(nullptr);
            } else {
                slot->field_data.push_back(p);
                p += aligned64(f.sample_bytes * b);
            }
        }
        slot->ids = reinterpret_cast<std::int64_t*>(p);
        slot->valid = reinterpret_cast<std::uint8_t*>(p + b * sizeof(std::int64_t));
        slot->ragged_values.resize(fields.size());
        slot->ragged_offsets.resize(fields.size());
        slot->read_ids.reserve(b);
        slot->read_pos.reserve(b);
        ring->free.push_back(slot.get());
        ring->slots.push_back(std::move(slot));
    }
    return ring;
}

}  // namespace mpistage::detail
