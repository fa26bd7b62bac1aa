#pragma once
// The ring of batch buffers ("slots") of one loader, allocated once and recycled: a slot
// returns to the ring when the last batch copy (or tensor) holding it is gone.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "device/host_memory.hpp"
#include "mpistage/source.hpp"

namespace mpistage::detail {

/// One buffer of the ring: every fixed field [B, ...], the index [B] and the valid mask [B].
struct Slot {
    HostBlock block;
    std::vector<std::byte*> field_data;  // per field (nullptr for ragged)
    std::vector<std::vector<std::byte>> ragged_values;
    std::vector<std::vector<std::int64_t>> ragged_offsets;
    std::int64_t* ids = nullptr;
    std::uint8_t* valid = nullptr;
    std::vector<std::uint64_t> read_ids;  // scratch: ids to read
    std::vector<std::size_t> read_pos;    // scratch: their batch positions
    std::uint64_t step = 0;
    /// Samples the slot can hold (its fixed fields are [capacity, ...]).
    std::uint64_t capacity = 0;
    /// Slots of the batch held (≤ capacity).
    std::size_t size = 0;
    std::size_t num_valid = 0;
    std::uint64_t bytes = 0;
};

/// The ring of slots, shared with every lease so it outlives the loader if batches do.
/// `m` guards `free`; `cv` signals a returned slot (and the prefetcher's own state changes).
struct Ring {
    std::mutex m;
    std::condition_variable cv;
    std::vector<std::unique_ptr<Slot>> slots;
    std::deque<Slot*> free;
    /// Samples one slot holds (its fixed fields are [batch_capacity, ...]).
    std::uint64_t batch_capacity = 0;

    /// Thread-safe: puts `s` back into the free list.
    void release(Slot* s);
    /// Slots lent to an asynchronous host → device copy (`lend_to_copy`): they return when
    /// the copy completed, whatever the caller does. Guarded by `m`.
    std::size_t copying = 0;
    /// Thread-safe: takes a free slot without waiting, nullptr when none is free.
    Slot* take_if_free();
    /// Thread-safe: marks one more slot as lent to a copy in flight.
    void lend_to_copy();
    /// Thread-safe: a slot lent to a copy returns (its copy completed).
    void release_copied(Slot* s);
    /// Thread-safe: takes a free slot (waiting while slots lent to copies are out, bounded as
    /// `wait_while_lent`), nullptr when every slot is held otherwise (by the caller or the
    /// pipeline). @throws CudaError when the lent slots cannot come back.
    Slot* try_take();

    /// Bounds on waiting for slots lent to copies, set by the loader when it stages to a CUDA
    /// device (unset: waits are unbounded, and no slot is ever lent). `copy_check` throws the
    /// device's CudaError once its copy stream failed (after a sticky error the runtime never
    /// runs the host functions that return the slots); it is called every 100 ms of waiting,
    /// without `m`, on the waiting (consumer's) thread. After `copy_timeout` (0: unbounded) of
    /// waiting with slots still lent, the wait is a CudaError naming them.
    std::function<void()> copy_check;
    std::chrono::seconds copy_timeout{0};
    /// Waits on `cv` (`lk` holds `m`) until `done()`, bounded as above while slots are lent.
    /// @throws CudaError, what `copy_check` throws.
    void wait_while_lent(std::unique_lock<std::mutex>& lk, const std::function<bool()>& done);
};

/// Bytes of one slot for `fields` and batch size `b` (each fixed field 64-byte aligned, plus
/// the index and valid mask). @throws ConfigError on overflow.
std::uint64_t slot_bytes(const std::vector<FieldInfo>& fields, std::uint64_t b);

/// Bytes of all slot blocks of `ring` (ragged values grow beyond it as batches need). Thread-safe
/// once the ring is built (slots are never added later).
std::uint64_t ring_bytes(const Ring& ring);

/// Allocates `count` slots of `slot_bytes(fields, b)` bytes (batches of up to `b` samples),
/// pinned when `pinned`.
/// @throws CudaError, std::bad_alloc.
std::shared_ptr<Ring> make_ring(const std::vector<FieldInfo>& fields, std::uint64_t b,
                                std::uint64_t count, bool pinned);

}  // namespace mpistage::detail
