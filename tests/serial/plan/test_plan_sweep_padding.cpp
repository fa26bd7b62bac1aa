/// @file
/// Planner sweep (plan_sweep.hpp), padding: no batch without a sample unless all its slots are
/// flagged padding, and padded slots hold what the remainder policy says.

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "plan_sweep.hpp"

namespace {

using mpistage::EpochPlan;
using mpistage::kPaddingId;
using mpistage::Remainder;
using mpistage::Sharding;
using mpistage::Shuffle;
using namespace mpistage_test_plan;

// ---- no unflagged empty batch -----------------------------------------------------------------

TEST_P(PlanProperties, NoUnflaggedEmptyBatch) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const std::uint64_t b = c.batch_size;
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
            const std::string at = describe(c, e);
            for (int r = 0; r < c.world_size; ++r) {
                const EpochPlan& p = wp.ranks[static_cast<std::size_t>(r)];
                const std::string rat = at + " rank=" + std::to_string(r);
                if (p.valid.size() != p.steps * b) continue;  // reported by EqualSteps
                std::uint64_t padding = 0;
                bool seen_padding = false;
                for (std::uint64_t s = 0; s < p.steps; ++s) {
                    std::uint64_t n_valid = 0;
                    for (std::uint64_t j = 0; j < b; ++j) {
                        const std::uint8_t flag = p.valid[s * b + j];
                        v.lazy_check(flag == 0 || flag == 1, [&] {
                            return v.message(rat, "valid flag is neither 0 nor 1");
                        });
                        if (flag) {
                            ++n_valid;
                            v.lazy_check(!seen_padding, [&] {
                                return v.message(rat, "valid slot after a padding slot (step " +
                                                          std::to_string(s) +
                                                          "): padding must only fill the tail");
                            });
                        } else {
                            seen_padding = true;
                            ++padding;
                        }
                    }
                    if (n_valid == 0) {
                        // Allowed only as a batch whose every slot is flagged padding.
                        v.check(c.remainder != Remainder::drop, rat,
                                "drop: batch " + std::to_string(s) + " has no sample");
                        for (std::uint64_t j = 0; j < b; ++j) {
                            v.lazy_check(p.valid[s * b + j] == 0, [&] {
                                return v.message(rat, "empty batch " + std::to_string(s) +
                                                          " not flagged padding");
                            });
                        }
                    }
                    if (c.remainder == Remainder::drop) {
                        v.check(n_valid == b, rat,
                                "drop: batch " + std::to_string(s) + " is not full");
                    }
                }
                // Padding is minimal: at most one batch's worth per rank, so at most one
                // all-padding batch, and only as the rank's last batch.
                v.check(padding <= b, rat,
                        std::to_string(padding) + " padding slots on one rank, more than B");
            }
        }
    });
    EXPECT_EQ(v.count(), 0);
}

// ---- padding semantics ------------------------------------------------------------------------

TEST_P(PlanProperties, PaddingSemantics) {
    Violations v;
    for_each_case(mode(), remainder(), v, [&](const Case& c) {
        const std::uint64_t n = c.num_samples;
        const std::uint64_t b = c.batch_size;
        for (std::uint64_t e = 0; e < kEpochs; ++e) {
            const WorldPlan wp = mpistage_test_plan::plan_world(c, e);
            const std::string at = describe(c, e);
            std::uint64_t pad_count = 0;  // padding slots of all ranks so far, in rank order
            for (int r = 0; r < c.world_size; ++r) {
                const EpochPlan& p = wp.ranks[static_cast<std::size_t>(r)];
                const std::string rat = at + " rank=" + std::to_string(r);
                if (p.valid.size() != p.steps * b || p.ids.size() != p.steps * b) continue;
                for (std::size_t k = 0; k < p.ids.size(); ++k) {
                    if (p.valid[k]) continue;
                    const std::int64_t id = p.ids[k];
                    const std::string slot = " (slot " + std::to_string(k) + ")";
                    switch (c.remainder) {
                        case Remainder::drop:
                            v.check(false, rat, "drop: slot flagged padding" + slot);
                            break;
                        case Remainder::mask:
                            v.check(id == kPaddingId, rat,
                                    "mask: padded slot holds " + std::to_string(id) + ", not -1" +
                                        slot);
                            break;
                        case Remainder::pad: {
                            if (!v.check(id >= 0 && static_cast<std::uint64_t>(id) < n, rat,
                                         "pad: padded slot holds " + std::to_string(id) +
                                             ", not a real sample" + slot)) {
                                break;
                            }
                            // Padding repeats the head of the epoch order, as DistributedSampler.
                            if (c.mode.sharding == Sharding::byte_range) {
                                // byte_range: padding slots of all ranks, numbered in rank order,
                                // repeat samples 0, 1, 2, ... of the dataset.
                                v.check(static_cast<std::uint64_t>(id) == pad_count % n, rat,
                                        "pad: padding slot " + std::to_string(pad_count) +
                                            " repeats " + std::to_string(id) + ", expected " +
                                            std::to_string(pad_count % n) + slot);
                            } else {
                                // global: position p >= N repeats the sample at position (p-N) % N.
                                const bool strided = c.mode.shuffle == Shuffle::chunks;
                                const std::uint64_t pos = mpistage_test_plan::global_position(
                                    k, r, c.world_size, b, strided);
                                const std::uint64_t head = (pos - n) % n;
                                const auto [head_rank, head_slot] =
                                    mpistage_test_plan::global_slot(head, c.world_size, b, strided);
                                const auto& owner = wp.ranks[static_cast<std::size_t>(head_rank)];
                                const auto hk = static_cast<std::size_t>(head_slot);
                                v.check(
                                    hk < owner.ids.size() && owner.valid[hk] && owner.ids[hk] == id,
                                    rat,
                                    "pad: position " + std::to_string(pos) +
                                        " does not repeat the sample at position " +
                                        std::to_string(head) + slot);
                            }
                            break;
                        }
                    }
                    ++pad_count;
                }
            }
            v.check(pad_count == wp.totals.padding_slots, at,
                    "padding slots " + std::to_string(pad_count) + " != totals.padding_slots");
        }
    });
    EXPECT_EQ(v.count(), 0);
}

}  // namespace
