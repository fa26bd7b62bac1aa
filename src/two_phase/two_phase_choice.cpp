// The cost model of `TwoPhase::automatic`: measure the source, the plan and the exchange as
// this job sees them, agree on the slowest rank's numbers, predict both step times.
#include "two_phase/two_phase_choice.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <utility>

#include "comm/agree.hpp"
#include "mpistage/hash.hpp"
#include "pipeline/fill.hpp"
#include "two_phase/two_phase.hpp"

namespace mpistage::detail {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSmallReads = 16;                        ///< single-sample reads at random ids
constexpr std::uint64_t kLargeReadBytes = 4u << 20;    ///< the contiguous read, about
constexpr std::uint64_t kMaxLargeReadSamples = 65536;  ///< ... and at most this many samples
constexpr std::uint64_t kPlanSteps = 4;                ///< steps of the plan whose runs count
constexpr int kExchanges = 3;                          ///< alltoallv timed, the minimum kept
constexpr int kLargeReads = 3;                         ///< contiguous reads timed, the fastest kept
constexpr std::uint64_t kTrialSteps = 2;               ///< real steps timed each way by the trial
constexpr std::uint64_t kMaxExchangeBytes = 256u << 20;  ///< larger steps: time scaled up
constexpr double kMaxBytesPerSecond = 1e15;  ///< a bandwidth above is noise (t_M ≈ t_1)

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Takes the samples of a probe read into scratch memory (touched before the read, as the
/// ring's slots are) and counts their bytes.
class ScratchSink final : public BatchSink {
public:
    ScratchSink(const std::vector<FieldInfo>& fields, std::size_t count)
        : fields_(fields), fixed_(fields.size()) {
        for (std::size_t f = 0; f < fields.size(); ++f) {
            if (fields[f].ragged) continue;
            fixed_[f].resize(count * fields[f].sample_bytes);
            fixed_bytes_ += count * fields[f].sample_bytes;
        }
    }
    std::byte* fixed(std::size_t f, std::size_t k) override {
        return fixed_[f].data() + k * fields_[f].sample_bytes;
    }
    std::byte* ragged(std::size_t, std::size_t, std::uint64_t size_bytes) override {
        ragged_bytes_ += size_bytes;
        ragged_.emplace_back(static_cast<std::size_t>(size_bytes));
        return ragged_.back().data();
    }
    std::uint64_t bytes() const noexcept { return fixed_bytes_ + ragged_bytes_; }

private:
    const std::vector<FieldInfo>& fields_;
    std::vector<std::vector<std::byte>> fixed_;
    std::deque<std::vector<std::byte>> ragged_;  // stable addresses until the read returns
    std::uint64_t fixed_bytes_ = 0;
    std::uint64_t ragged_bytes_ = 0;
};

/// Seconds of one `Source::read` of `ids` and the bytes it delivered.
std::pair<double, std::uint64_t> timed_read(const Source& source,
                                            const std::vector<std::uint64_t>& ids) {
    ScratchSink sink(source.fields(), ids.size());
    const auto t0 = Clock::now();
    source.read(ids.data(), ids.size(), sink);
    return {seconds_since(t0), sink.bytes()};
}

struct ReadProbe {
    double latency_s = 0;
    double bytes_per_second = 0;
    double sample_bytes = 0;
};

/// Local: latency and bandwidth of `source` on this rank (see measure_two_phase_costs).
ReadProbe probe_reads(const Source& source, std::uint64_t n, std::uint64_t seed) {
    std::uint64_t state = seed;
    const auto random_id = [&] {
        state = mix64(state + 0x9e3779b97f4a7c15ULL);
        return state % n;
    };
    (void)timed_read(source, {random_id()});  // warm-up: first-touch caches and handles
    std::vector<double> small_s;
    std::uint64_t small_bytes = 0;
    for (int i = 0; i < kSmallReads; ++i) {
        const auto [t, b] = timed_read(source, {random_id()});
        small_s.push_back(t);
        small_bytes += b;
    }
    ReadProbe p;
    std::nth_element(small_s.begin(), small_s.begin() + kSmallReads / 2, small_s.end());
    const double t1 = small_s[kSmallReads / 2];  // the median: one descheduling is not latency
    p.sample_bytes = std::max(1.0, static_cast<double>(small_bytes) / kSmallReads);
    const auto wanted = static_cast<std::uint64_t>(
        std::ceil(static_cast<double>(kLargeReadBytes) / p.sample_bytes));
    const std::uint64_t m =
        std::min(std::max<std::uint64_t>(wanted, 2), std::min(n, kMaxLargeReadSamples));
    const std::uint64_t first = n > m ? random_id() % (n - m + 1) : 0;
    std::vector<std::uint64_t> ids(m);
    for (std::uint64_t k = 0; k < m; ++k) ids[k] = first + k;
    double tm = std::numeric_limits<double>::infinity();
    std::uint64_t bm = 0;
    for (int i = 0; i < kLargeReads; ++i) {
        const auto [t, b] = timed_read(source, ids);
        tm = std::min(tm, t);
        bm = b;
    }
    const auto large = static_cast<double>(bm);
    if (large > p.sample_bytes && tm > t1) {
        p.bytes_per_second = (large - p.sample_bytes) / (tm - t1);
    } else {  // one sample only, or noise: the large read's rate, a lower bound
        p.bytes_per_second = large / std::max(tm, 1e-9);
    }
    p.bytes_per_second = std::min(p.bytes_per_second, kMaxBytesPerSecond);  // fits a uint64
    p.latency_s = std::max(0.0, t1 - p.sample_bytes / p.bytes_per_second);
    return p;
}

struct PlanProbe {
    std::vector<std::uint64_t> plain_runs, slab_runs, slab_samples;  // per step, this rank
    double step_ids_s = 0;
};

/// Local: the runs of the first steps of epoch 0 on this rank, and the time of their ids.
PlanProbe probe_plan(const Communicator& comm, const Source& source, const PlanOptions& plan,
                     std::uint64_t n, std::uint64_t steps,
                     const std::vector<std::uint64_t>& slabs) {
    SampleBytesFn bytes;
    if (plan.balance_steps) bytes = [&source](std::uint64_t id) { return source.sample_bytes(id); };
    const auto r = static_cast<std::uint64_t>(comm.rank());
    const std::uint64_t lo = slabs[r], hi = slabs[r + 1];
    PlanProbe p;
    const std::uint64_t k = std::min(steps, kPlanSteps);
    double ids_s = 0;
    for (std::uint64_t step = 0; step < k; ++step) {
        const auto t0 = Clock::now();
        const auto ids = global_step_ids(n, comm.size(), plan, 0, {}, step, bytes);
        ids_s += seconds_since(t0);
        std::vector<std::uint64_t> own, slab;
        for (std::size_t i = 0; i < ids.size(); ++i) {
            if (ids[i] < 0) continue;  // padding is never read
            const auto id = static_cast<std::uint64_t>(ids[i]);
            if (i / plan.batch_size == r) own.push_back(id);
            if (id >= lo && id < hi) slab.push_back(id);
        }
        p.plain_runs.push_back(coalesced_runs(std::move(own)));
        p.slab_samples.push_back(slab.size());
        p.slab_runs.push_back(coalesced_runs(std::move(slab)));
    }
    p.step_ids_s = k > 0 ? ids_s / static_cast<double>(k) : 0;
    return p;
}

/// Collective (kExchanges alltoallv): the fastest of the exchanges of `step_bytes` bytes from
/// this rank, split evenly among the ranks (scaled up from kMaxExchangeBytes when larger).
double probe_exchange(const Communicator& comm, std::uint64_t step_bytes) {
    const auto w = static_cast<std::uint64_t>(comm.size());
    const std::uint64_t sent = std::min(step_bytes, kMaxExchangeBytes);
    // The packed exchange the two-phase reader makes every step, into buffers reused as the
    // reader's are (the first exchange maps their pages; the fastest of kExchanges is kept).
    const std::string send(static_cast<std::size_t>(sent / w * w), '\0');
    std::vector<std::uint64_t> offsets(w + 1);
    for (std::uint64_t r = 0; r <= w; ++r) offsets[r] = r * (sent / w);
    std::string recv;
    std::vector<std::uint64_t> recv_offsets;
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < kExchanges; ++i) {
        const auto t0 = Clock::now();
        comm.alltoallv(send, offsets, recv, recv_offsets);
        best = std::min(best, seconds_since(t0));
    }
    return sent > 0 && sent < step_bytes
               ? best * static_cast<double>(step_bytes) / static_cast<double>(sent)
               : best;
}

std::uint64_t nanos(double seconds) {
    return static_cast<std::uint64_t>(std::llround(std::max(0.0, seconds) * 1e9));
}

}  // namespace

std::uint64_t coalesced_runs(std::vector<std::uint64_t> ids) {
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::uint64_t runs = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i == 0 || ids[i] != ids[i - 1] + 1) ++runs;
    }
    return runs;
}

TwoPhasePrediction predict_two_phase(const TwoPhaseCosts& c) {
    const auto transfer = [&](double samples) {
        return c.bytes_per_second > 0 ? samples * c.sample_bytes / c.bytes_per_second : 0.0;
    };
    TwoPhasePrediction p;
    p.plain_step_s = (c.plain_runs * c.latency_s + transfer(static_cast<double>(c.batch_size))) /
                     static_cast<double>(std::max<std::uint64_t>(1, c.io_threads));
    p.two_phase_step_s =
        c.slab_runs * c.latency_s + transfer(c.slab_samples) + c.exchange_s + c.step_ids_s;
    p.chosen = p.plain_step_s > 0 && p.two_phase_step_s <= kTwoPhaseMargin * p.plain_step_s;
    return p;
}

bool trial_confirms(const TwoPhaseTrial& t) {
    return t.plain_step_s > 0 && t.two_phase_step_s <= kTwoPhaseMargin * t.plain_step_s;
}

std::string describe_two_phase(const TwoPhaseCosts& c, const TwoPhasePrediction& p,
                               const TwoPhaseTrial* trial) {
    const bool on = p.chosen && (trial == nullptr || trial_confirms(*trial));
    char line[800];
    int n = std::snprintf(
        line, sizeof line,
        "two-phase auto: %s: predicted step %.3f ms two-phase vs %.3f ms plain (%.2fx; "
        "chosen at <= %.2fx); measured %.1f us/request, %.1f MB/s, %.0f B/sample, "
        "runs per step %.1f plain (%llu read%s in flight) vs %.1f in the slab (%.1f "
        "samples), exchange %.3f ms, step ids %.3f ms",
        on ? "on" : "off", p.two_phase_step_s * 1e3, p.plain_step_s * 1e3,
        p.plain_step_s > 0 ? p.two_phase_step_s / p.plain_step_s : 0.0, kTwoPhaseMargin,
        c.latency_s * 1e6, c.bytes_per_second / 1e6, c.sample_bytes, c.plain_runs,
        static_cast<unsigned long long>(c.io_threads), c.io_threads == 1 ? "" : "s", c.slab_runs,
        c.slab_samples, c.exchange_s * 1e3, c.step_ids_s * 1e3);
    if (trial != nullptr && n > 0 && static_cast<std::size_t>(n) < sizeof line) {
        n += std::snprintf(
            line + n, sizeof line - static_cast<std::size_t>(n),
            "; trial of %llu real steps: %.3f ms two-phase vs %.3f ms plain "
            "(%.2fx)",
            static_cast<unsigned long long>(trial->steps), trial->two_phase_step_s * 1e3,
            trial->plain_step_s * 1e3,
            trial->plain_step_s > 0 ? trial->two_phase_step_s / trial->plain_step_s : 0.0);
    }
    return std::string(
        line, std::min<std::size_t>(n > 0 ? static_cast<std::size_t>(n) : 0, sizeof line - 1));
}

TwoPhaseCosts measure_two_phase_costs(const Communicator& comm, const Source& source,
                                      const PlanOptions& plan, std::uint64_t num_samples,
                                      std::uint64_t steps, std::uint64_t io_threads) {
    const auto slabs = two_phase_slabs(comm, source, num_samples);
    ReadProbe reads;
    PlanProbe probe;
    run_agreed(comm, [&] {
        reads = probe_reads(source, num_samples,
                            mix64(plan.seed ^ static_cast<std::uint64_t>(comm.rank())));
        probe = probe_plan(comm, source, plan, num_samples, steps, slabs);
    });
    const double exchange = probe_exchange(
        comm, static_cast<std::uint64_t>(
                  std::ceil(static_cast<double>(plan.batch_size) * reads.sample_bytes)));
    // One allreduce: the slowest rank's costs (maxima as complements, ~x) and the minima.
    std::vector<std::uint64_t> v{~nanos(reads.latency_s),
                                 ~nanos(probe.step_ids_s),
                                 ~nanos(exchange),
                                 ~static_cast<std::uint64_t>(std::ceil(reads.sample_bytes)),
                                 static_cast<std::uint64_t>(reads.bytes_per_second),
                                 std::max<std::uint64_t>(1, io_threads)};
    const std::size_t k = probe.plain_runs.size();  // the same on every rank
    for (std::size_t s = 0; s < k; ++s) {
        v.push_back(~probe.plain_runs[s]);
        v.push_back(~probe.slab_runs[s]);
        v.push_back(~probe.slab_samples[s]);
    }
    const auto m = comm.allreduce_min(v);
    TwoPhaseCosts c;
    c.latency_s = static_cast<double>(~m[0]) / 1e9;
    c.step_ids_s = static_cast<double>(~m[1]) / 1e9;
    c.exchange_s = static_cast<double>(~m[2]) / 1e9;
    c.sample_bytes = static_cast<double>(~m[3]);
    c.bytes_per_second = static_cast<double>(m[4]);
    c.io_threads = m[5];
    c.batch_size = plan.batch_size;
    for (std::size_t s = 0; s < k; ++s) {  // per step the slowest rank, then the mean
        c.plain_runs += static_cast<double>(~m[6 + 3 * s]) / static_cast<double>(k);
        c.slab_runs += static_cast<double>(~m[7 + 3 * s]) / static_cast<double>(k);
        c.slab_samples += static_cast<double>(~m[8 + 3 * s]) / static_cast<double>(k);
    }
    return c;
}

TwoPhaseTrial trial_two_phase(const Communicator& comm, const Source& source,
                              const PlanOptions& options, std::uint64_t num_samples,
                              const EpochPlan& plan, Slot& slot, std::uint64_t io_threads) {
    TwoPhaseTrial t;
    t.steps = std::min<std::uint64_t>(plan.steps, kTrialSteps);
    double plain = 0;
    run_agreed(comm, [&] {
        for (std::uint64_t s = 0; s < t.steps; ++s) {
            const auto t0 = Clock::now();
            fill_slot(slot, source, plan, s);
            plain += seconds_since(t0);
        }
    });
    TwoPhaseReader reader(comm, source, two_phase_slabs(comm, source, num_samples), options, 0, {},
                          plan);
    comm.barrier();  // the steps start together, as after an epoch's start
    double two = 0;
    for (std::uint64_t s = 0; s < t.steps; ++s) {
        const auto t0 = Clock::now();
        agree_or_throw(comm, reader.read_step(&slot, s, {}));
        two += seconds_since(t0);
    }
    const auto per_step = [&](double x) {
        return t.steps > 0 ? x / static_cast<double>(t.steps) : 0.0;
    };
    const auto m = comm.allreduce_min(std::vector<std::uint64_t>{
        ~nanos(per_step(plain) / static_cast<double>(std::max<std::uint64_t>(1, io_threads))),
        ~nanos(per_step(two))});
    t.plain_step_s = static_cast<double>(~m[0]) / 1e9;
    t.two_phase_step_s = static_cast<double>(~m[1]) / 1e9;
    return t;
}

}  // namespace mpistage::detail
