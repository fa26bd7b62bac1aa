// Pure decisions of the stream loader, simulated for many world sizes: stream assignment by
// weight, chunk ownership, the resume filter, batch fitting under byte/token budgets with
// buckets, deficits and the transfer plan, and the wire format of items.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "loader/stream/stream_item.hpp"
#include "loader/stream/stream_plan.hpp"

namespace {

using namespace mpistage;
using namespace mpistage::detail;

TEST(StreamPlan, AssignStreamsBalancesWeightWithinTheLargest) {
    std::mt19937_64 rng(3);
    for (int w = 1; w <= 9; ++w) {
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<double> weights(1 + rng() % 30);
            for (auto& x : weights) x = 1 + static_cast<double>(rng() % 100);
            const auto owner = assign_streams(weights, w);
            std::vector<double> load(static_cast<std::size_t>(w), 0);
            for (std::size_t s = 0; s < weights.size(); ++s) {
                ASSERT_GE(owner[s], 0);
                ASSERT_LT(owner[s], w);
                load[static_cast<std::size_t>(owner[s])] += weights[s];
            }
            // Greedy LPT: no rank exceeds the least-loaded rank by more than the largest weight.
            const double largest = *std::max_element(weights.begin(), weights.end());
            const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
            EXPECT_LE(*hi - *lo, largest) << "w=" << w;
        }
    }
    // By count (all weights 1): round-robin, every rank gets a stream while there are enough.
    const auto owner = assign_streams(std::vector<double>(4, 1.0), 4);
    EXPECT_EQ(std::set<int>(owner.begin(), owner.end()).size(), 4u);
}

TEST(StreamPlan, ChunkOwnerIsRoundRobinOffsetByStream) {
    for (int w = 1; w <= 5; ++w) {
        for (std::uint64_t p = 0; p < 100; ++p) {
            EXPECT_EQ(chunk_owner(0, p, 7, w),
                      static_cast<int>((p / 7) % static_cast<std::uint64_t>(w)));
            EXPECT_EQ(chunk_owner(3, p, 7, w),
                      static_cast<int>((p / 7 + 3) % static_cast<std::uint64_t>(w)));
        }
    }
}

// Walks a filter from 0 to `n` the way the reader does.
std::vector<std::uint64_t> wanted(const PositionFilter& f, std::uint64_t n) {
    std::vector<std::uint64_t> out;
    for (std::uint64_t p = f.next_wanted(0); p < n; p = f.next_wanted(p + 1)) out.push_back(p);
    return out;
}

TEST(StreamPlan, PositionFiltersOfAllRanksPartitionTheStream) {
    for (int w = 1; w <= 6; ++w) {
        for (std::uint64_t k : {1, 3, 10}) {
            StreamPosition resumed{50, {{5, 9}, {20, 21}, {40, 50}}};
            std::multiset<std::uint64_t> all;
            for (int r = 0; r < w; ++r) {
                const PositionFilter f(2, k, r, w, resumed);
                for (auto p : wanted(f, 80)) {
                    EXPECT_EQ(chunk_owner(2, p, k, w), r);
                    all.insert(p);
                }
            }
            std::multiset<std::uint64_t> expected;
            for (std::uint64_t p = 0; p < 80; ++p) {
                const bool pending = (p >= 5 && p < 9) || p == 20 || p >= 40;
                if (pending) expected.insert(p);
            }
            EXPECT_EQ(all, expected) << "w=" << w << " k=" << k;
        }
    }
    const PositionFilter whole(0, 0, 0, 1, StreamPosition{});
    EXPECT_EQ(wanted(whole, 5), (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
}

TEST(StreamPlan, FitterKeepsBatchesWithinBudgetOrFlagsOneOversizeSample) {
    std::mt19937_64 rng(9);
    for (int trial = 0; trial < 200; ++trial) {
        StreamConfig o;
        o.batch_size = 1 + rng() % 50;
        if (trial % 2) {
            o.batch_bytes = 100 + rng() % 1000;
        } else {
            o.batch_tokens = 100 + rng() % 1000;
        }
        std::vector<SampleCost> q(rng() % 80);
        for (auto& c : q) {
            const std::uint64_t big = rng() % 20 == 0 ? 5000 : 0;  // heavy tail
            c.size_bytes = rng() % 200 + big;
            c.tokens = rng() % 60 + big / 10;
        }
        const BatchChoice ch = choose_batch(q, o);
        if (q.empty()) {
            EXPECT_TRUE(ch.take.empty());
            continue;
        }
        ASSERT_FALSE(ch.take.empty());
        EXPECT_LE(ch.take.size(), o.batch_size);
        std::uint64_t bytes = 0, max_tokens = 0;
        for (auto i : ch.take) {
            bytes += q[i].size_bytes;
            max_tokens = std::max(max_tokens, q[i].tokens);
        }
        const bool over = (o.batch_bytes && bytes > o.batch_bytes) ||
                          (o.batch_tokens && max_tokens * ch.take.size() > o.batch_tokens);
        EXPECT_EQ(over, ch.oversize);
        if (over) EXPECT_EQ(ch.take.size(), 1u);
        EXPECT_TRUE(std::is_sorted(ch.take.begin(), ch.take.end()));
        EXPECT_EQ(ch.take.front(), 0u) << "without buckets the oldest sample goes first";
    }
}

TEST(StreamPlan, BucketsTakeSamplesOfOneLengthClass) {
    StreamConfig o;
    o.batch_size = 4;
    o.length_buckets = {10, 100};
    const std::vector<SampleCost> q{{5, 0}, {50, 0}, {6, 0}, {60, 0}, {70, 0}, {80, 0}, {7, 0}};
    const BatchChoice ch = choose_batch(q, o);
    // The short bucket (oldest sample) holds 3 samples, not full; the middle bucket is full.
    EXPECT_EQ(ch.take, (std::vector<std::size_t>{1, 3, 4, 5}));
    EXPECT_TRUE(ch.full);
    EXPECT_EQ(bucket_of({5, 0}, o), 0u);
    EXPECT_EQ(bucket_of({500, 0}, o), 2u);
}

// The steps a rank can yield from its queue alone (a window): known answers, and the budget
// path against the count-only path where both apply.
TEST(StreamPlan, FullBatchesCountsWhatChooseBatchWouldTakeInTurn) {
    StreamConfig o;
    o.batch_size = 3;
    const std::vector<SampleCost> ten(10, SampleCost{4, 0});
    EXPECT_EQ(full_batches(ten, o, 16), 3u);  // 3 + 3 + 3, the last sample not a batch
    EXPECT_EQ(full_batches(ten, o, 2), 2u);
    EXPECT_EQ(full_batches({}, o, 16), 0u);
    // Byte budget 10 (at most 3 samples): {5,5} full (the third 5 does not fit), {5,5} full,
    // {5} is not full.
    o.batch_bytes = 10;
    EXPECT_EQ(full_batches(std::vector<SampleCost>(5, SampleCost{5, 0}), o, 16), 2u);
    // An oversize sample is a (full) batch of its own.
    EXPECT_EQ(full_batches({{50, 0}, {1, 0}}, o, 16), 1u);
    // A budget nothing reaches leaves the count limit: the same as without a budget.
    o.batch_bytes = 1000;
    EXPECT_EQ(full_batches(ten, o, 16), 3u);
    // Buckets: the short bucket never fills (3 samples); the middle one fills once.
    StreamConfig b;
    b.batch_size = 4;
    b.length_buckets = {10, 100};
    const std::vector<SampleCost> q{{5, 0}, {50, 0}, {6, 0}, {60, 0}, {70, 0}, {80, 0}, {7, 0}};
    EXPECT_EQ(full_batches(q, b, 16), 1u);
    std::vector<SampleCost> q2 = q;
    q2.push_back({8, 0});  // now the short bucket fills too
    EXPECT_EQ(full_batches(q2, b, 16), 2u);
}

TEST(StreamPlan, TransferPlanCoversDeficitsFromSurplusesOnly) {
    std::mt19937_64 rng(1);
    for (int trial = 0; trial < 500; ++trial) {
        const std::size_t w = 1 + rng() % 8;
        std::vector<std::uint64_t> d(w), s(w);
        for (std::size_t r = 0; r < w; ++r) {
            if (rng() % 2) {
                d[r] = rng() % 10;
            } else {
                s[r] = rng() % 10;
            }
        }
        const auto t = transfer_plan(d, s);
        std::uint64_t moved = 0;
        for (std::size_t a = 0; a < w; ++a) {
            std::uint64_t out = 0, in = 0;
            for (std::size_t b = 0; b < w; ++b) {
                out += t[a][b];
                in += t[b][a];
            }
            EXPECT_LE(out, s[a]);
            EXPECT_LE(in, d[a]);
            EXPECT_EQ(t[a][a], 0u);
            moved += out;
        }
        const std::uint64_t need = std::accumulate(d.begin(), d.end(), std::uint64_t{0});
        const std::uint64_t have = std::accumulate(s.begin(), s.end(), std::uint64_t{0});
        EXPECT_EQ(moved, std::min(need, have));
    }
}

TEST(StreamPlan, DeficitsOfFullRanksAreZero) {
    StreamConfig o;
    o.batch_size = 8;
    std::vector<RankStep> ranks(3);
    ranks[0] = {false, 20, false, 8, true, 0, 0, 0};
    ranks[1] = {false, 3, true, 3, false, 0, 0, 0};
    ranks[2] = {false, 0, true, 0, false, 0, 0, 0};
    EXPECT_EQ(deficits(ranks, o), (std::vector<std::uint64_t>{0, 5, 8}));
    const auto packed = RankStep::unpack(
        [&] {
            std::vector<std::uint64_t> v;
            for (const auto& r : ranks) {
                const auto p = r.pack();
                v.insert(v.end(), p.begin(), p.end());
            }
            return v;
        }(),
        3);
    EXPECT_EQ(packed[0].queued, 20u);
    EXPECT_TRUE(packed[1].exhausted);
}

TEST(StreamPlan, ItemsSurviveTheWireFormat) {
    const std::vector<FieldInfo> fields{{"id", DType::int64, {}, 8, false},
                                        {"text", DType::uint8, {}, 0, true}};
    StreamConfig o;
    StreamSample s;
    s.fields = {std::vector<std::byte>(8, std::byte{7}), std::vector<std::byte>(13, std::byte{1})};
    s.key = 99;
    const StreamItem item = make_item(std::move(s), fields, 3, 41, o);
    EXPECT_EQ(item.size_bytes, 21u);
    std::string wire;
    encode_item(item, wire);
    encode_item(item, wire);
    std::vector<StreamItem> back;
    decode_items(wire, back);
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back[1].stream, 3u);
    EXPECT_EQ(back[1].position, 41u);
    EXPECT_EQ(back[1].key, 99u);
    EXPECT_EQ(back[1].fields, item.fields);
    wire.pop_back();
    back.clear();
    EXPECT_THROW(decode_items(wire, back), FormatError);
    StreamSample wrong;
    wrong.fields = {std::vector<std::byte>(4), {}};
    EXPECT_THROW(make_item(std::move(wrong), fields, 0, 0, o), FormatError);
}

TEST(StreamPlan, StateJsonRoundTripAndRejectsOtherDocuments) {
    LoaderState st;
    st.input = LoaderInput::stream;
    st.dataset_fingerprint = "abc";
    st.epoch = 2;
    st.steps_consumed = 12;
    st.samples_consumed = 345;
    st.streams = {{100, {{3, 5}, {90, 100}}}, {0, {}}};
    const LoaderState back = LoaderState::from_json(st.to_json(), "test");
    EXPECT_EQ(back.to_json(), st.to_json());
    EXPECT_EQ(back.input, LoaderInput::stream);
    EXPECT_EQ(back.epoch, 2u);
    EXPECT_EQ(back.streams[0].pending[1].second, 100u);
    EXPECT_TRUE(back == st);
    EXPECT_THROW(LoaderState::from_json("{\"format\": \"other\"}", "test"), ConfigError);
    EXPECT_THROW(LoaderState::from_json("not json", "test"), ConfigError);
}

// A hand-edited number is refused with its key, never wrapped: -1 read as 2^64-1 made
// --verify walk up to that position.
TEST(StreamPlan, StateJsonRefusesNegativeFractionalAndHugeNumbers) {
    LoaderState st;
    st.input = LoaderInput::stream;
    st.dataset_fingerprint = "abc";
    st.steps_consumed = 2;
    st.samples_consumed = 7;
    st.streams = {{7, {{1, 3}}}};
    const std::string good = st.to_json();
    const auto edited = [&](const std::string& from, const std::string& to) {
        std::string t = good;
        const auto at = t.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return t.replace(at, from.size(), to);
    };
    const std::vector<std::pair<std::string, std::string>> edits = {
        {"\"next\":7", "\"next\":-1"},
        {"\"next\":7", "\"next\":18446744073709551616"},
        {"\"next\":7", "\"next\":7.5"},
        {"\"steps_consumed\":2", "\"steps_consumed\":-2"},
        {"\"samples_consumed\":7", "\"samples_consumed\":\"7\""},
        {"[1,3]", "[3,1]"},
        {"[1,3]", "[1,9]"},
        {"\"input\":\"stream\"", "\"input\":\"tape\""},
        {"[1,3]", "[-1,3]"},
        {"[1,3]", "[1]"},
        {"\"pending\":[[1,3]]", "\"pending\":5"},
        {"\"next\":7,", ""},
    };
    for (const auto& [from, to] : edits) {
        const std::string text = edited(from, to);
        try {
            LoaderState::from_json(text, "'s.json'");
            ADD_FAILURE() << "accepted: " << text;
        } catch (const ConfigError& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find("state 's.json'"), std::string::npos) << what;
            EXPECT_NE(what.find("'"), std::string::npos) << what;  // names the key
        }
    }
}

}  // namespace
