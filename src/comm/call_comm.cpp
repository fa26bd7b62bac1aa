#include "comm/call_comm.hpp"

#include <utility>

namespace mpistage::detail {

CallComm::CallComm(const CommRef& ref) {
    if (ref.donor_ != nullptr || ref.comm_ == nullptr) {
        own_.emplace(ref.duplicate());  // the handed-over one, or one MPI_Comm_dup
    } else {
        borrowed_ = ref.comm_;
    }
}

CommRef CallComm::pass() noexcept {
    if (!own_) return CommRef(*borrowed_);
    CommRef ref(*own_);
    ref.comm_ = nullptr;
    ref.donor_ = &*own_;
    return ref;
}

}  // namespace mpistage::detail
