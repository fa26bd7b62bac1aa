/// @file
/// Global sharding: the epoch order does not depend on the world size or batch size, and drop
/// keeps exactly its prefix; shuffles depend on the seed.

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>

#include "plan_sweep.hpp"

namespace {

using mpistage::EpochPlan;
using mpistage::PlanOptions;
using mpistage::Remainder;
using mpistage::Sharding;
using mpistage::Shuffle;
using namespace mpistage_test_plan;

// ---- global sharding does not depend on W -----------------------------------------------------

TEST(PlanGlobal, SequenceIndependentOfWorldSizeAndBatchSize) {
    Violations v;
    for (const Shuffle shuffle : {Shuffle::none, Shuffle::global}) {
        for (const std::uint64_t n : kNumSamples) {
            if (n == 0) continue;
            for (std::uint64_t e = 0; e < kEpochs; ++e) {
                PlanOptions ref_o;
                ref_o.batch_size = 1;
                ref_o.seed = 7;
                ref_o.sharding = Sharding::global;
                ref_o.shuffle = shuffle;
                ref_o.remainder = Remainder::mask;
                const EpochPlan ref = mpistage::plan_epoch(n, 1, 0, ref_o, e);
                for (const int w : kWorldSizes) {
                    for (const std::uint64_t b : kBatchSizes) {
                        for (const Remainder rem : kRemainders) {
                            PlanOptions o = ref_o;
                            o.batch_size = b;
                            o.remainder = rem;
                            const std::string at =
                                "N=" + std::to_string(n) + " W=" + std::to_string(w) +
                                " B=" + std::to_string(b) + " " + mpistage::to_string(rem) +
                                " shuffle=" + mpistage::to_string(shuffle) +
                                " epoch=" + std::to_string(e);
                            for (int r = 0; r < w; ++r) {
                                const EpochPlan p = mpistage::plan_epoch(n, w, r, o, e);
                                for (std::size_t k = 0; k < p.ids.size(); ++k) {
                                    if (!p.valid[k]) continue;
                                    const auto pos =
                                        mpistage_test_plan::global_position(k, r, w, b);
                                    if (!v.lazy_check(pos < n && p.ids[k] == ref.ids[pos], [&] {
                                            return v.message(at,
                                                             "position " + std::to_string(pos) +
                                                                 " differs from the W=1 sequence");
                                        })) {
                                        break;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    EXPECT_EQ(v.count(), 0);
}

TEST(PlanGlobal, DropKeepsExactlyThePrefixOfTheEpochOrder) {
    // With drop and global sharding, the consumed set after S steps is exactly the first S*W*B
    // positions of the epoch order (DESIGN.md §2), which is what makes elastic resume possible.
    for (const std::uint64_t n : {209u, 922u}) {
        for (const int w : {3, 7, 16}) {
            PlanOptions o;
            o.batch_size = 5;
            o.seed = 11;
            o.sharding = Sharding::global;
            o.shuffle = Shuffle::global;
            o.remainder = Remainder::mask;
            const EpochPlan ref = mpistage::plan_epoch(n, 1, 0, o, 2);
            std::set<std::int64_t> prefix;
            o.remainder = Remainder::drop;
            const auto totals = mpistage::plan_totals(n, w, o);
            for (std::uint64_t p = 0; p < totals.valid_samples; ++p) prefix.insert(ref.ids[p]);
            std::set<std::int64_t> kept;
            for (int r = 0; r < w; ++r) {
                for (const auto id :
                     mpistage_test_plan::valid_ids(mpistage::plan_epoch(n, w, r, o, 2))) {
                    kept.insert(id);
                }
            }
            EXPECT_EQ(kept, prefix) << "N=" << n << " W=" << w;
        }
    }
}

// ---- shuffles depend on the seed --------------------------------------------------------------

TEST(PlanShuffle, SeedChangesTheOrder) {
    for (const Mode m :
         {Mode{Sharding::byte_range, Shuffle::local}, Mode{Sharding::global, Shuffle::global}}) {
        PlanOptions a;
        a.batch_size = 6;
        a.sharding = m.sharding;
        a.shuffle = m.shuffle;
        a.remainder = Remainder::mask;
        a.seed = 1;
        PlanOptions b = a;
        b.seed = 2;
        for (int r = 0; r < 4; ++r) {
            EXPECT_NE(mpistage::plan_epoch(922, 4, r, a, 0).ids,
                      mpistage::plan_epoch(922, 4, r, b, 0).ids)
                << mpistage::to_string(m.sharding) << " rank " << r;
        }
    }
}

}  // namespace
