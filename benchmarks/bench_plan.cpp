// Planning cost (issue "Fault recovery"): the time and memory one rank needs to build its plan
// of an epoch for N = 10^8 samples at W = 1024 (simulated: the planner is a pure function, so
// one process computes the plan of any rank). Goal: ≤ 1 s and ≤ 16 bytes per record of the
// rank's share. Also reports the cost of the per-step byte balance (balance_steps), which
// computes the assignment of every global batch (O(N log(W·B)) per rank), at a smaller N.
//
// Usage: bench_plan [N] [W] [B]   (defaults 100000000 1024 32). Prints one line per case and a
// verdict; exit status 0 (it measures, it does not assert).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
    double seconds = 0;
    double bytes_per_record = 0;
    std::uint64_t share = 0;
};

// Median of 5 timings of the plan of `rank`; bytes are the plan's own vectors (ids + valid),
// per record of the rank's share (N/W).
Result measure(std::uint64_t n, int w, int rank, const mpistage::PlanOptions& o,
               const mpistage::SampleBytesFn& sizes) {
    std::vector<double> times;
    Result r;
    for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = Clock::now();
        const mpistage::EpochPlan p = mpistage::plan_epoch(n, w, rank, o, 3, {}, sizes);
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        r.share = p.steps * p.batch_size;
        r.bytes_per_record =
            static_cast<double>(p.ids.capacity() * sizeof(std::int64_t) + p.valid.capacity()) /
            static_cast<double>(std::max<std::uint64_t>(1, n / static_cast<std::uint64_t>(w)));
    }
    std::sort(times.begin(), times.end());
    r.seconds = times[times.size() / 2];
    return r;
}

mpistage::PlanOptions options(mpistage::Sharding sharding, std::uint64_t b, bool balance) {
    mpistage::PlanOptions o;
    o.batch_size = b;
    o.seed = 7;
    o.sharding = sharding;
    o.shuffle = sharding == mpistage::Sharding::global ? mpistage::Shuffle::global
                                                       : mpistage::Shuffle::local;
    o.remainder = mpistage::Remainder::pad;
    o.balance_steps = balance;
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const std::uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100000000ull;
    const int w = argc > 2 ? std::atoi(argv[2]) : 1024;
    const std::uint64_t b = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 32;
    std::printf("plan construction, N=%llu W=%d B=%llu (simulated ranks, median of 5)\n",
                static_cast<unsigned long long>(n), w, static_cast<unsigned long long>(b));
    std::printf("%-28s %6s %10s %12s %14s\n", "case", "rank", "share", "seconds", "bytes/record");
    bool goal = true;
    for (const auto sharding : {mpistage::Sharding::global, mpistage::Sharding::byte_range}) {
        for (const int rank : {0, w / 2, w - 1}) {
            const Result r = measure(n, w, rank, options(sharding, b, false), {});
            std::printf("%-28s %6d %10llu %12.4f %14.2f\n",
                        ("sharding " + mpistage::to_string(sharding)).c_str(), rank,
                        static_cast<unsigned long long>(r.share), r.seconds, r.bytes_per_record);
            goal = goal && r.seconds <= 1.0 && r.bytes_per_record <= 16.0;
        }
    }
    std::printf("goal (<= 1 s and <= 16 B/record per rank): %s\n", goal ? "met" : "NOT met");

    // The byte balance plans every global batch: its cost grows with N, not N/W.
    const std::uint64_t nb = std::min<std::uint64_t>(n, 1000000);
    const int wb = std::min(w, 64);
    const auto sizes = [](std::uint64_t id) { return 100 + mpistage::mix64(id) % 5000; };
    for (const bool balance : {false, true}) {
        const Result r = measure(nb, wb, 0, options(mpistage::Sharding::global, b, balance), sizes);
        std::printf("%-28s %6d %10llu %12.4f %14.2f   (N=%llu W=%d)\n",
                    balance ? "global + balance_steps" : "global + size report", 0,
                    static_cast<unsigned long long>(r.share), r.seconds, r.bytes_per_record,
                    static_cast<unsigned long long>(nb), wb);
    }
    return 0;
}
