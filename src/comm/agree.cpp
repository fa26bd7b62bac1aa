// The agreement vocabulary: every "same on every rank?" check and every "local error → the
// same error everywhere" step of the library goes through these functions.
#include "comm/agree.hpp"

#include <mpi.h>

#include "mpistage/comm.hpp"
#include "mpistage/hash.hpp"

namespace mpistage {

LocalStatus capture(const std::function<void()>& fn) noexcept {
    try {
        fn();
    } catch (...) {
        return LocalStatus::from_current_exception();
    }
    return {};
}

void require_same(const Communicator& comm, const std::vector<NamedValue>& values,
                  const std::string& context, const std::string& advice) {
    // Agree on the count first: a rank with a different list must not desynchronise the gather.
    const std::uint64_t k = values.size();
    const std::uint64_t k_min = comm.allreduce_min(k);
    const std::uint64_t k_max = comm.allreduce_max(k);
    if (k_min != k_max) {
        throw ConfigError(context + ": ranks disagree on the number of values to compare (" +
                          std::to_string(k_min) + " vs " + std::to_string(k_max) + "); " + advice);
    }
    if (k == 0) return;
    std::vector<std::uint64_t> mine(k);
    for (std::size_t i = 0; i < k; ++i) mine[i] = fnv1a64(values[i].text);
    const std::vector<std::uint64_t> all = comm.allgather(mine);
    std::string detail;
    for (std::size_t i = 0; i < k; ++i) {
        int other = -1;
        for (int r = 1; r < comm.size() && other < 0; ++r) {
            if (all[static_cast<std::size_t>(r) * k + i] != all[i]) other = r;
        }
        if (other < 0) continue;
        // Every rank knows `other`, so both broadcasts are made by all ranks in the same order.
        // Names may hold rank-local text (a path); rank 0's name keeps the message identical.
        const std::string name = comm.broadcast(values[i].name, 0);
        const std::string t0 = comm.broadcast(values[i].text, 0);
        const std::string tr = comm.broadcast(values[i].text, other);
        detail += (detail.empty() ? " " : "; ") + name + " is '" + t0 +
                  "' on rank 0 but '" + tr + "' on rank " + std::to_string(other);
    }
    if (detail.empty()) return;
    throw ConfigError(context + ": ranks disagree:" + detail + "; " + advice);
}

void require_same(const Communicator& comm, const std::string& name, const std::string& text,
                  const std::string& context, const std::string& advice) {
    require_same(comm, std::vector<NamedValue>{{name, text}}, context, advice);
}

}  // namespace mpistage
