// Stream order under `rebalance`: items a dry rank receives from another keep the order in
// which their stream produced them (they used to arrive reversed, newest first). With `source`
// sharding every rank must see each stream's positions strictly ascending, at every W, for
// fixed batches and byte budgets, while items really move between ranks.
#include <map>

#include "stream_test_util.hpp"

namespace {

using namespace stream_test;

/// Local: true when, for every stream, the positions in `ids` (delivery order) ascend.
bool each_stream_ascends(const std::vector<std::int64_t>& ids, std::string& first_bad) {
    std::map<std::uint64_t, std::int64_t> last;
    for (std::int64_t id : ids) {
        const std::uint64_t s = static_cast<std::uint64_t>(id) >> 40;
        const auto p =
            static_cast<std::int64_t>(static_cast<std::uint64_t>(id) & ((1ull << 40) - 1));
        const auto it = last.find(s);
        if (it != last.end() && p <= it->second) {
            first_bad = "stream " + std::to_string(s) + ": position " + std::to_string(p) +
                        " after " + std::to_string(it->second);
            return false;
        }
        last[s] = p;
    }
    return true;
}

TEST(StreamOrder, RebalanceKeepsEachStreamsOrderUnderSourceSharding) {
    const int w = world_size();
    Communicator comm(MPI_COMM_WORLD);
    // Unequal streams: the ranks reading the short ones run dry first and receive items.
    const std::vector<std::vector<std::uint64_t>> patterns{
        {300, 5, 40, 0, 77, 12, 150}, {1000}, {9, 9, 200, 1}};
    std::uint64_t moved_total = 0;
    for (const auto& lengths : patterns) {
        const auto source = make_source(lengths);
        for (std::uint64_t b : {1, 4, 16}) {
            for (std::uint64_t budget : {std::uint64_t{0}, std::uint64_t{600}}) {
                LoaderOptions o;
                o.stream.sharding = StreamSharding::source;
                o.stream.remainder = StreamRemainder::rebalance;
                o.plan.batch_size = o.plan.budget.max_batch_samples = b;
                o.plan.budget.batch_bytes = budget;
                o.safety.timeout = std::chrono::seconds(60);
                Stream loader(comm, source, o);
                const Seen seen = consume(loader);
                const std::string what = "B=" + std::to_string(b) +
                                         " budget=" + std::to_string(budget) +
                                         " streams=" + std::to_string(lengths.size());
                expect_exactly_once(seen, expected_ids(lengths), what);
                std::string bad;
                const bool ascends = each_stream_ascends(seen.ids, bad);
                EXPECT_TRUE(ascends) << what << " rank " << comm.rank() << ": " << bad;
                moved_total += comm.allreduce_sum(loader.stats().stream.items_sent);
            }
        }
    }
    // Not vacuous: with peers, rebalance moved items between ranks.
    if (w > 1) EXPECT_GT(moved_total, 0u);
}

}  // namespace
