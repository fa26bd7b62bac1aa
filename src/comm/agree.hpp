#pragma once
// The agreement machinery (internal, not installed): steps that may fail on some ranks only are
// captured as a LocalStatus and agreed across ranks, so every rank throws the same exception or
// none does; require_same checks that every rank passed the same values.

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "mpistage/comm.hpp"
#include "mpistage/error.hpp"

namespace mpistage {

/// `LocalStatus::message` of a `std::bad_alloc`; `run_agreed` adds the rank, the phase and
/// file of the communicator's context and the resident bytes to it.
inline constexpr const char* kOutOfMemory = "out of memory (std::bad_alloc)";

/// Local outcome of a step that may fail on some ranks only.
struct LocalStatus {
    bool failed = false;
    ErrorKind kind = ErrorKind::generic;
    std::string message;

    /// Captures the exception in flight (call from a `catch` block).
    static LocalStatus from_current_exception() noexcept;
    static LocalStatus from_exception(const std::exception_ptr& ep) noexcept;
};

/// Collective: agrees on `status` across ranks. When any rank failed, every rank throws the
/// same exception: the type and message of the lowest failing rank, prefixed with that rank's
/// number and the count of failing ranks. Returns normally on every rank when none failed.
/// @throws the agreed `Error` subclass; MpiError when the agreement itself fails.
void agree_or_throw(const Communicator& comm, const LocalStatus& status);

/// Collective: like `agree_or_throw`, and when no rank failed returns the minimum of `value`
/// over all ranks, in the same single allreduce (used by the loader to agree on how many
/// prefetched batches every rank holds ready). Values above 2^64 − world size are clamped.
/// @throws the agreed `Error` subclass; MpiError when the agreement itself fails.
std::uint64_t agree_min_or_throw(const Communicator& comm, const LocalStatus& status,
                                 std::uint64_t value);

/// Outcome of `agree_tagged_or_throw`.
struct TaggedAgreement {
    /// Every rank passed the same tag. When false, nothing else below is set: the ranks were
    /// in different calls, and the caller reports that (the same way on every rank).
    bool same_tag = false;
    /// Minimum of `value` over the ranks.
    std::uint64_t min_value = 0;
    /// Some rank passed `flag = true`.
    bool any_flag = false;
};

/// Collective: `agree_min_or_throw` that also checks that every rank passed the same `tag`
/// (a hash of what the caller is doing, e.g. "window at step 4 of epoch 0") and ORs `flag`,
/// in one allreduce of four words. Callers whose collectives could otherwise match silently
/// (one rank starting a new epoch while another waits for a batch) put what they do in `tag`,
/// so the mismatch is seen on every rank; statuses are agreed (and thrown) only when the tags
/// match. @throws the agreed `Error` subclass; MpiError when the agreement itself fails.
TaggedAgreement agree_tagged_or_throw(const Communicator& comm, std::uint64_t tag,
                                      const LocalStatus& status, std::uint64_t value, bool flag);

/// Collective: every rank's part once an agreement found that rank `first_rank` is the lowest
/// failing one (`status`: this rank's own outcome): counts the failing ranks, broadcasts that
/// rank's error and throws it on every rank, as `agree_or_throw` does.
/// @throws the agreed `Error` subclass, always.
[[noreturn]] void throw_agreed_error(const Communicator& comm, const LocalStatus& status,
                                     std::uint64_t first_rank);

/// Collective: runs `fn` on every rank, then agrees on the outcome (see `agree_or_throw`).
/// `fn` must not itself make collective calls that other ranks might skip.
void run_agreed(const Communicator& comm, const std::function<void()>& fn);

/// Local: runs `fn` and returns its outcome as a `LocalStatus` instead of throwing, so the
/// caller can reach the next agreement point on every rank (then call `agree_or_throw`).
LocalStatus capture(const std::function<void()>& fn) noexcept;

/// Collective: like `run_agreed`, but returns `fn`'s result on every rank.
/// @throws the agreed `Error` subclass when `fn` threw on any rank.
template <class Fn>
auto run_agreed_value(const Communicator& comm, Fn&& fn) -> decltype(fn()) {
    decltype(fn()) out{};
    run_agreed(comm, [&] { out = fn(); });
    return out;
}

/// One value every rank must hold identically: a name for messages and its text form.
struct NamedValue {
    std::string name;  ///< what the value is, e.g. "--batch-size" or "file size of a.tfrecord"
    std::string text;  ///< the value as text; ranks compare hashes of it, then print it
};

/// Collective: checks that every rank passed the same texts (in the same order; the list's
/// length must be equal on all ranks). Only texts are compared; names label the message, which
/// uses rank 0's names so it is identical everywhere. Costs one allgather of one hash per value
/// when they agree. When they differ, every rank throws the same `ConfigError`:
/// "`context`: ranks disagree: NAME is 'A' on rank 0 but 'B' on rank R; ... `advice`".
/// @throws ConfigError (agreed); MpiError when a collective fails.
void require_same(const Communicator& comm, const std::vector<NamedValue>& values,
                  const std::string& context, const std::string& advice);

/// Collective: `require_same` for one value.
void require_same(const Communicator& comm, const std::string& name, const std::string& text,
                  const std::string& context, const std::string& advice);

}  // namespace mpistage
