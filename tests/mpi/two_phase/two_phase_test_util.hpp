#pragma once
// Helpers of the two-phase read tests: a Source wrapper that records (and can fail) the reads
// each rank makes, and one epoch of two-phase reads checked step by step against the direct
// (non-two-phase) read of the same plan and against the files' generators.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "h5t_mpi.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/plan.hpp"
#include "mpistage/source.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "pipeline/fill.hpp"
#include "pipeline/ring.hpp"
#include "two_phase/two_phase.hpp"

namespace two_phase_test {

using namespace mpistage;

/// Delegates to `inner`, records the ids of every `read` call, and throws an IoError at call
/// `fail_call` (0-based) when `fail` is set on this rank.
class RecordingSource final : public Source {
public:
    explicit RecordingSource(const Source& inner) : inner_(inner) {}
    const std::vector<FieldInfo>& fields() const override { return inner_.fields(); }
    std::uint64_t num_samples() const override { return inner_.num_samples(); }
    std::uint64_t records_in_cut(int rank, int world_size) const override {
        return inner_.records_in_cut(rank, world_size);
    }
    std::string fingerprint() const override { return inner_.fingerprint(); }
    std::uint64_t sample_bytes(std::uint64_t id) const override { return inner_.sample_bytes(id); }
    void read(const std::uint64_t* ids, std::size_t count, BatchSink& sink) const override {
        calls.emplace_back(ids, ids + count);
        if (fail && calls.size() == fail_call + 1) {
            throw IoError("injected read error on rank " + std::to_string(h5t::rank()) +
                          " at read call " + std::to_string(fail_call));
        }
        inner_.read(ids, count, sink);
    }

    mutable std::vector<std::vector<std::uint64_t>> calls;
    bool fail = false;
    std::size_t fail_call = 0;

private:
    const Source& inner_;
};

/// The features of `tier_test::example` records: "image" 4 bytes, "label" int64, "text" ragged.
inline TfRecordOptions example_features() {
    TfRecordOptions o;
    o.features = {parse_feature_spec("image:bytes/uint8:4"), parse_feature_spec("label:int64"),
                  parse_feature_spec("text:bytes")};
    return o;
}

/// True when sample `id` in batch position `j` of `slot` holds the generator's bytes.
using SlotTruth = std::function<bool(const detail::Slot& slot, std::size_t j, std::uint64_t id)>;

/// What one epoch of two-phase reads gave this rank.
struct EpochYield {
    std::vector<std::int64_t> valid_ids;
    std::uint64_t steps = 0;
    std::uint64_t unlike_direct = 0;   ///< slots whose ids or bytes differ from fill_slot's
    std::uint64_t unlike_truth = 0;    ///< samples whose bytes differ from the generator's
    std::uint64_t real_slots = 0;      ///< slots with an id ≥ 0 (read by some rank)
    std::uint64_t read_outside = 0;    ///< ids this rank read outside its slab
    std::uint64_t unsorted_calls = 0;  ///< read calls whose ids were not ascending
    std::uint64_t ids_read = 0;
    std::string error;
    int error_kind = 0;
};

/// Not collective: the slots' ids, masks, fixed bytes and ragged values are equal.
inline bool same_slot(const detail::Slot& a, const detail::Slot& b,
                      const std::vector<FieldInfo>& fields, std::size_t batch) {
    if (!std::equal(a.ids, a.ids + batch, b.ids) || !std::equal(a.valid, a.valid + batch, b.valid))
        return false;
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].ragged) {
            if (a.ragged_offsets[f] != b.ragged_offsets[f] ||
                a.ragged_values[f] != b.ragged_values[f])
                return false;
        } else if (std::memcmp(a.field_data[f], b.field_data[f], batch * fields[f].sample_bytes) !=
                   0) {
            return false;
        }
    }
    return true;
}

/// Collective: epoch `e` of `source` (a RecordingSource over `direct`) read two-phase, every
/// step compared with `fill_slot` from `direct` and with `truth`. Stops at the first agreed
/// error (then `error` holds it, equal on every rank). Steps where `withhold_slot` says so get
/// no slot on this rank (as when the caller holds every ring slot).
inline EpochYield two_phase_epoch(const Communicator& comm, RecordingSource& source,
                                  const Source& direct, const PlanOptions& o, std::uint64_t e,
                                  const SlotTruth& truth,
                                  const std::function<bool(std::uint64_t)>& withhold_slot = {}) {
    EpochYield y;
    const std::uint64_t n = source.num_samples();
    const SampleBytesFn sizes = [&](std::uint64_t id) { return direct.sample_bytes(id); };
    const EpochPlan plan = plan_epoch(n, comm.size(), comm.rank(), o, e, {}, sizes);
    const auto slabs = detail::two_phase_slabs(comm, source, n);
    detail::TwoPhaseReader reader(comm, source, slabs, o, e, {}, plan);
    const auto ring = detail::make_ring(source.fields(), o.batch_size, 2, false);
    source.calls.clear();
    for (std::uint64_t s = 0; s < plan.steps; ++s) {
        detail::Slot* slot = ring->try_take();
        detail::Slot* plain = ring->try_take();
        const bool withhold = withhold_slot && withhold_slot(s);
        try {
            agree_or_throw(comm, reader.read_step(withhold ? nullptr : slot, s, {}));
        } catch (const Error& ex) {
            y.error = ex.what();
            y.error_kind = static_cast<int>(ex.kind());
            ring->release(slot);
            ring->release(plain);
            break;
        }
        detail::fill_slot(*plain, direct, plan, s);
        ++y.steps;
        y.unlike_direct += !same_slot(*slot, *plain, source.fields(), o.batch_size);
        for (std::size_t j = 0; j < o.batch_size; ++j) {
            if (slot->valid[j]) y.valid_ids.push_back(slot->ids[j]);
            if (slot->ids[j] < 0) continue;
            ++y.real_slots;
            y.unlike_truth += !truth(*slot, j, static_cast<std::uint64_t>(slot->ids[j]));
        }
        ring->release(slot);
        ring->release(plain);
    }
    const auto r = static_cast<std::size_t>(comm.rank());
    for (const auto& call : source.calls) {
        y.unsorted_calls += !std::is_sorted(call.begin(), call.end());
        y.ids_read += call.size();
        for (const std::uint64_t id : call) y.read_outside += id < slabs[r] || id >= slabs[r + 1];
    }
    return y;
}

/// Collective: a clean epoch: equal steps, exactly once, every byte as the direct read and the
/// generator, each real slot read exactly once by the rank owning its slab, in ascending order.
inline void expect_clean_epoch(const EpochYield& y, const EpochTotals& totals,
                               const std::string& what) {
    EXPECT_EQ(y.error, "") << what;
    EXPECT_TRUE(h5t::same_on_all_ranks(y.steps)) << what;
    EXPECT_EQ(y.steps, totals.steps) << what;
    EXPECT_EQ(y.unlike_direct, 0u) << what;
    EXPECT_EQ(y.unlike_truth, 0u) << what;
    EXPECT_EQ(y.read_outside, 0u) << what;
    EXPECT_EQ(y.unsorted_calls, 0u) << what;
    EXPECT_EQ(h5t::sum(y.ids_read), h5t::sum(y.real_slots)) << what;
    const auto all = h5t::allgatherv(y.valid_ids);
    const std::set<std::int64_t> distinct(all.begin(), all.end());
    EXPECT_EQ(distinct.size(), all.size()) << what << ": a sample was yielded twice";
    EXPECT_EQ(all.size(), totals.valid_samples) << what;
}

}  // namespace two_phase_test
