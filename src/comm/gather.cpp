// The communicator's vector collectives: element-wise exclusive scan, vector broadcast and the
// gathers of a different count per rank (allgatherv / gatherv), all under the watchdog.
#include <mpi.h>

#include <limits>
#include <string>

#include "mpistage/comm.hpp"

namespace mpistage {

namespace {

/// Move-only owner of a committed contiguous datatype of `bytes` bytes.
class ElementType {
public:
    explicit ElementType(std::size_t bytes) {
        check_mpi(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &type_),
                  "MPI_Type_contiguous(element)");
        const int rc = MPI_Type_commit(&type_);
        if (rc != MPI_SUCCESS) MPI_Type_free(&type_);
        check_mpi(rc, "MPI_Type_commit(element)");
    }
    ElementType(const ElementType&) = delete;
    ElementType& operator=(const ElementType&) = delete;
    ~ElementType() {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
    }
    MPI_Datatype get() const noexcept { return type_; }

private:
    MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

}  // namespace

std::vector<std::uint64_t> Communicator::exscan_sum(
    const std::vector<std::uint64_t>& values) const {
    std::vector<std::uint64_t> out(values.size(), 0);
    if (values.empty()) {
        barrier();
        return out;
    }
    if (values.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
        throw ConfigError("comm: exscan of more than 2^31 - 1 values");
    }
    watched("MPI_Iexscan(vector)", [&](MPI_Request* r) {
        return MPI_Iexscan(values.data(), out.data(), static_cast<int>(values.size()), MPI_UINT64_T,
                           MPI_SUM, comm_, r);
    });
    if (rank_ == 0) out.assign(values.size(), 0);  // MPI leaves rank 0's result undefined
    return out;
}

std::vector<std::uint64_t> Communicator::broadcast(const std::vector<std::uint64_t>& values,
                                                   int root) const {
    std::vector<std::uint64_t> out = values;
    if (out.empty()) {
        barrier();
        return out;
    }
    if (out.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
        throw ConfigError("comm: broadcast of more than 2^31 - 1 values");
    }
    watched("MPI_Ibcast(vector)", [&](MPI_Request* r) {
        return MPI_Ibcast(out.data(), static_cast<int>(out.size()), MPI_UINT64_T, root, comm_, r);
    });
    return out;
}

void Communicator::gatherv_bytes(const void* send, std::uint64_t count, std::size_t element_bytes,
                                 int root,
                                 const std::function<void*(std::uint64_t total)>& receive) const {
    // Counts and displacements of MPI_(All)gatherv are ints: every rank sees the same counts, so
    // every rank takes the same branch.
    const std::vector<std::uint64_t> counts = allgather(count);
    constexpr std::uint64_t kLimit = std::numeric_limits<int>::max();
    std::vector<int> rc(counts.size());
    std::vector<int> displs(counts.size());
    std::uint64_t total = 0;  // stays <= kLimit
    bool too_many = false;
    for (std::size_t r = 0; r < counts.size() && !too_many; ++r) {
        too_many = counts[r] > kLimit - total;
        if (too_many) break;
        rc[r] = static_cast<int>(counts[r]);
        displs[r] = static_cast<int>(total);
        total += counts[r];
    }
    if (too_many) {
        throw ConfigError("comm: a gather of more than 2^31 - 1 elements (" +
                          std::to_string(element_bytes) + " bytes each) is not supported");
    }
    const bool receives = root < 0 || root == rank_;
    void* recv = receives ? receive(total) : nullptr;
    const ElementType type(element_bytes);
    if (root < 0) {
        watched("MPI_Iallgatherv", [&](MPI_Request* r) {
            return MPI_Iallgatherv(send, static_cast<int>(count), type.get(), recv, rc.data(),
                                   displs.data(), type.get(), comm_, r);
        });
    } else {
        watched("MPI_Igatherv", [&](MPI_Request* r) {
            return MPI_Igatherv(send, static_cast<int>(count), type.get(), recv, rc.data(),
                                displs.data(), type.get(), root, comm_, r);
        });
    }
}

}  // namespace mpistage
