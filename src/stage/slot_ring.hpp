#pragma once
// The stage component's ring of host slots: a fixed number of equal blocks (pinned when the
// batches go to a CUDA device), allocated once and recycled. A slot is lent as a shared
// "lease"; it returns to the ring when the last copy of the lease is gone (a staged batch, a
// tensor over it, the stager while its copy is in flight), also after the ring's owner is gone.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "stage/host_memory.hpp"

namespace mpistage::detail {

/// One host block of the ring. `used_bytes` and `step` are set by whoever fills it.
struct HostSlot {
    HostBlock block;
    std::size_t index = 0;
    std::size_t used_bytes = 0;
    std::uint64_t step = 0;
};

/// Thread-safe ring of host slots.
class HostSlotRing : public std::enable_shared_from_this<HostSlotRing> {
public:
    /// Allocates `slots` blocks of `slot_bytes` (pinned when `pinned`; call under a DeviceGuard
    /// of the stage's device). @throws ConfigError for zero slots, CudaError, std::bad_alloc.
    static std::shared_ptr<HostSlotRing> create(std::size_t slots, std::size_t slot_bytes,
                                                bool pinned);

    /// Blocks until a slot is free (back-pressure) and lends it; nullptr once `shutdown` was
    /// called.
    std::shared_ptr<HostSlot> acquire();
    /// Lends a free slot, or nullptr when every slot is lent (or after shutdown).
    std::shared_ptr<HostSlot> try_acquire();
    /// Wakes every `acquire` waiting and makes later calls return nullptr. Lent slots stay
    /// valid and still return to the ring.
    void shutdown();

    std::size_t slots() const noexcept { return slots_.size(); }
    std::size_t slot_bytes() const noexcept { return slot_bytes_; }
    bool pinned() const noexcept { return pinned_; }
    /// Slots not lent right now.
    std::size_t free_slots() const;
    /// Threads blocked in `acquire` right now.
    std::size_t waiting() const;

private:
    HostSlotRing() = default;
    std::shared_ptr<HostSlot> lend_locked();
    void give_back(HostSlot* slot);

    mutable std::mutex m_;
    std::condition_variable cv_;
    std::vector<std::unique_ptr<HostSlot>> slots_;
    std::vector<HostSlot*> free_;
    std::size_t slot_bytes_ = 0;
    std::size_t waiting_ = 0;
    bool pinned_ = false;
    bool shut_ = false;
};

}  // namespace mpistage::detail
