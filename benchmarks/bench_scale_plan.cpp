// The measured side of the scale model (benchmarks/scale_model.py, README "Scale model"): the
// real planner's time and heap for one rank's plan of an epoch at world size W, without W
// processes (the planner is a pure function of N, W, rank and options, so one process computes
// any rank's plan). Heap bytes are counted by replacing the global operator new/delete in
// this program: the peak of live bytes while the plan is built and the bytes the plan keeps.
//
// Usage: bench_scale_plan N N_BUDGET B W...   (budget cases at N_BUDGET samples) Prints one JSON
// object per line:
//   {"case": ..., "world": W, "samples": N, "seconds": CPU seconds of the calling thread, the
//    least of 5 (rank W/2; CPU time, not wall time, as the machine is shared: the planner is
//    single-threaded and CPU-bound), "peak_bytes", "kept_bytes"}
// Cases: fixed batches computed per slot (`plan_epoch_on_demand`, what the Loader uses) with
// byte_range + local shuffle and with global sharding; `global_step_ids` (the per-step work of
// two-phase reads: every rank computes the W·B ids of the step); budget batches (byte budget of
// B mean-size samples, sizes 100..5099 bytes) with byte_range and with global sharding, which
// are O(N) per rank: run them at a smaller N and scale (scale_model.py does, and says so).
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <new>
#include <string>
#include <vector>

#include "mpistage/hash.hpp"
#include "mpistage/plan.hpp"

namespace {

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};

void* counted_alloc(std::size_t n) {
    void* p = std::malloc(n == 0 ? 1 : n);
    if (!p) throw std::bad_alloc();
    const std::int64_t now = g_live.fetch_add(static_cast<std::int64_t>(malloc_usable_size(p))) +
                             static_cast<std::int64_t>(malloc_usable_size(p));
    std::int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    return p;
}

void counted_free(void* p) noexcept {
    if (!p) return;
    g_live.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(p)));
    std::free(p);
}

}  // namespace

void* operator new(std::size_t n) {
    return counted_alloc(n);
}
void* operator new[](std::size_t n) {
    return counted_alloc(n);
}
void operator delete(void* p) noexcept {
    counted_free(p);
}
void operator delete[](void* p) noexcept {
    counted_free(p);
}
void operator delete(void* p, std::size_t) noexcept {
    counted_free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
    counted_free(p);
}

namespace {

/// CPU seconds of the calling thread.
double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Measure {
    double seconds = 0;
    std::int64_t peak_bytes = 0;
    std::int64_t kept_bytes = 0;
};

/// Least CPU time of 5 calls of `fn` (which returns what the plan keeps); heap of the first.
template <class Fn>
Measure measure(Fn fn) {
    Measure m;
    std::vector<double> times;
    (void)fn();  // warm-up: the allocator's first growth is not the planner's cost
    for (int rep = 0; rep < 5; ++rep) {
        const std::int64_t before = g_live.load();
        g_peak.store(before);
        const double t0 = thread_cpu_seconds();
        {
            auto kept = fn();
            times.push_back(thread_cpu_seconds() - t0);
            if (rep == 0) {
                m.kept_bytes = g_live.load() - before;
                m.peak_bytes = g_peak.load() - before;
            }
        }
    }
    m.seconds = *std::min_element(times.begin(), times.end());
    return m;
}

void print(const char* name, int w, std::uint64_t n, const Measure& m) {
    std::printf(
        "{\"case\": \"%s\", \"world\": %d, \"samples\": %llu, \"seconds\": %.9f, "
        "\"peak_bytes\": %lld, \"kept_bytes\": %lld}\n",
        name, w, static_cast<unsigned long long>(n), m.seconds,
        static_cast<long long>(m.peak_bytes), static_cast<long long>(m.kept_bytes));
    std::fflush(stdout);
}

mpistage::PlanOptions options(mpistage::Sharding sharding, std::uint64_t b) {
    mpistage::PlanOptions o;
    o.batch_size = b;
    o.seed = 7;
    o.sharding = sharding;
    o.shuffle = sharding == mpistage::Sharding::global ? mpistage::Shuffle::global
                                                       : mpistage::Shuffle::local;
    o.remainder = mpistage::Remainder::pad;
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: bench_scale_plan N N_BUDGET B W...\n");
        return 2;
    }
    // Heap, never mmap, and no trimming: a plan's large vectors would otherwise be mapped and
    // page-faulted afresh on every call (kernel time in the thread's CPU time) depending on
    // glibc's dynamic mmap threshold, i.e. on which cases ran before.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    const std::uint64_t n = std::strtoull(argv[1], nullptr, 10);
    const std::uint64_t nb = std::strtoull(argv[2], nullptr, 10);
    const std::uint64_t b = std::strtoull(argv[3], nullptr, 10);
    const auto sizes = [](std::uint64_t id) { return 100 + mpistage::mix64(id) % 5000; };
    for (int i = 4; i < argc; ++i) {
        const int w = std::atoi(argv[i]);
        const int rank = w / 2;
        using mpistage::Sharding;
        for (const Sharding s : {Sharding::byte_range, Sharding::global}) {
            const auto o = options(s, b);
            const Measure m =
                measure([&] { return mpistage::plan_epoch_on_demand(n, w, rank, o, 3, {}); });
            print(s == Sharding::global ? "fixed global" : "fixed byte_range", w, n, m);
        }
        {
            const auto o = options(Sharding::global, b);
            const Measure m = measure([&] { return mpistage::global_step_ids(n, w, o, 3, {}, 1); });
            print("two-phase step ids", w, n, m);
        }
        for (const Sharding s : {Sharding::byte_range, Sharding::global}) {
            auto o = options(s, b);
            o.budget.batch_bytes = b * 2600;  // B samples of the mean size
            const Measure m = measure(
                [&] { return mpistage::plan_epoch_on_demand(nb, w, rank, o, 3, {}, sizes); });
            print(s == Sharding::global ? "budget global" : "budget byte_range", w, nb, m);
        }
    }
    return 0;
}
