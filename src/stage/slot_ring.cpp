// The stage component's ring of host slots (slot_ring.hpp).
#include "stage/slot_ring.hpp"

#include "mpistage/error.hpp"

namespace mpistage::detail {

std::shared_ptr<HostSlotRing> HostSlotRing::create(std::size_t slots, std::size_t slot_bytes,
                                                   bool pinned) {
    if (slots == 0) throw ConfigError("stage: the host ring needs at least one slot");
    std::shared_ptr<HostSlotRing> ring(new HostSlotRing());
    ring->slot_bytes_ = slot_bytes;
    ring->pinned_ = pinned;
    for (std::size_t i = 0; i < slots; ++i) {
        auto slot = std::make_unique<HostSlot>();
        slot->block = HostBlock(slot_bytes, pinned);
        slot->index = i;
        ring->free_.push_back(slot.get());
        ring->slots_.push_back(std::move(slot));
    }
    return ring;
}

std::shared_ptr<HostSlot> HostSlotRing::lend_locked() {
    HostSlot* s = free_.back();
    free_.pop_back();
    s->used_bytes = 0;
    // The lease keeps the ring alive, so a slot held past the ring's owner still returns.
    std::shared_ptr<HostSlotRing> self = shared_from_this();
    return std::shared_ptr<HostSlot>(s, [self](HostSlot* p) { self->give_back(p); });
}

std::shared_ptr<HostSlot> HostSlotRing::acquire() {
    std::unique_lock<std::mutex> lk(m_);
    ++waiting_;
    cv_.wait(lk, [&] { return shut_ || !free_.empty(); });
    --waiting_;
    if (shut_) return nullptr;
    return lend_locked();
}

std::shared_ptr<HostSlot> HostSlotRing::try_acquire() {
    std::lock_guard<std::mutex> lk(m_);
    if (shut_ || free_.empty()) return nullptr;
    return lend_locked();
}

void HostSlotRing::shutdown() {
    {
        std::lock_guard<std::mutex> lk(m_);
        shut_ = true;
    }
    cv_.notify_all();
}

std::size_t HostSlotRing::free_slots() const {
    std::lock_guard<std::mutex> lk(m_);
    return free_.size();
}

std::size_t HostSlotRing::waiting() const {
    std::lock_guard<std::mutex> lk(m_);
    return waiting_;
}

void HostSlotRing::give_back(HostSlot* slot) {
    {
        std::lock_guard<std::mutex> lk(m_);
        free_.push_back(slot);
    }
    cv_.notify_all();
}

}  // namespace mpistage::detail
