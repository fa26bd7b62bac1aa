// `mpistage stage`: one command for every input. Agree on the arguments and the input, refuse
// flags that do not apply to it, then one loop stages every epoch of files (fixed or budget
// batches) or of a --sqlite stream, saving and resuming the loader state on request, and one
// report (table and JSON) says what happened.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <thread>

#include "cli/atomic_file.hpp"
#include "cli/checkpoint.hpp"
#include "cli/commands.hpp"
#include "cli/flag_rules.hpp"
#include "cli/open_source.hpp"
#include "cli/progress.hpp"
#include "cli/report.hpp"
#include "cli/stage_checks.hpp"
#include "cli/stage_inputs.hpp"
#include "cli/stop_signals.hpp"
#include "cli/verify.hpp"
#include "comm/agree.hpp"
#include "mpistage/loader.hpp"

namespace mpistage::cli {

namespace {

using Clock = std::chrono::steady_clock;

// CPU seconds of this process so far (user + system, all threads).
double process_cpu_seconds() noexcept {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The state's own JSON for the report: the loader's or the stream's ("null": none).
std::string state_json(const std::optional<SavedState>& s) {
    if (!s) return "null";
    return s->loader.to_json();
}

/// What one rank's batches of one epoch held (counted as they are consumed).
struct BatchCounts {
    std::uint64_t batches = 0;
    std::uint64_t real = 0;
    std::uint64_t padding_steps = 0;
    std::uint64_t padding_slots = 0;
    std::uint64_t oversize = 0;
    std::uint64_t min_samples = 0;
    std::uint64_t max_samples = 0;
    std::uint64_t valid = 0;

    void add(const HostBatch& b, bool oversize_batch) {
        ++batches;
        valid += b.num_valid();
        padding_slots += b.size() - b.num_valid();
        oversize += oversize_batch ? 1 : 0;
        if (b.num_valid() == 0) {
            ++padding_steps;
            return;
        }
        ++real;
        min_samples =
            real == 1 ? b.num_valid() : std::min<std::uint64_t>(min_samples, b.num_valid());
        max_samples = std::max<std::uint64_t>(max_samples, b.num_valid());
    }
};

/// Collective (one allgather): the batch counts of every rank into `r`.
void add_batch_counts(const Communicator& comm, const BatchCounts& c, EpochReport& r) {
    constexpr std::size_t kWords = 8;
    const std::vector<std::uint64_t> all = comm.allgather(
        std::vector<std::uint64_t>{c.batches, c.real, c.padding_steps, c.padding_slots, c.oversize,
                                   c.min_samples, c.max_samples, c.valid});
    bool any_real = false;
    for (std::size_t k = 0; k + kWords <= all.size(); k += kWords) {
        r.steps = std::max(r.steps, all[k]);
        r.real_batches += all[k + 1];
        r.padding_steps += all[k + 2];
        r.padding_slots += all[k + 3];
        r.oversize += all[k + 4];
        if (all[k + 1] > 0) {
            r.min_batch_samples = any_real ? std::min(r.min_batch_samples, all[k + 5]) : all[k + 5];
            any_real = true;
        }
        r.max_batch_samples = std::max(r.max_batch_samples, all[k + 6]);
        r.valid_samples += all[k + 7];
    }
}

/// The one stage loop, for every input (files, budget batches, streams): epochs, steps taken,
/// where to stop and save, the exactly-once check.
template <class Input>
class StageRun {
public:
    StageRun(const Communicator& comm, const StageArgs& a, Input& input, const LocalChecks& local,
             std::uint64_t num_samples, Progress& progress)
        : comm_(comm),
          a_(a),
          input_(input),
          local_(local),
          num_samples_(num_samples),
          progress_(progress),
          saver_(a.save_state, a.verify && !a.stream(),
                 local.resume ? local.resume->epoch() : a.first_epoch, local.prior_ids) {}

    /// Collective: stages epoch `e` (or the rest of it, when resumed); with --verify, checks it
    /// exactly once (across the interrupted run too, when its ids are known).
    EpochReport stage_epoch(std::uint64_t e) {
        const bool resumed =
            local_.resume && local_.resume->epoch() == e && local_.resume->steps() > 0;
        const std::uint64_t first_step = resumed ? local_.resume->steps() : 0;
        // This rank's valid ids, kept only where they are written out (--ids-out, the
        // --verify id log of --save-state); --verify counts them by id range (IdCount).
        const bool keep_ids = !a_.ids_out.empty() || (a_.verify && saver_.enabled());
        std::vector<std::int64_t> ids;
        std::optional<IdCount> count;
        if (a_.verify) {
            const std::string input = a_.stream() ? a_.sqlite : a_.files.front();
            comm_.split_node();  // the bitmap is checked against the node's share (IdCount)
            run_agreed(comm_, [&] { count.emplace(comm_, num_samples_, input); });
        }
        const std::uint64_t every =
            exchange_interval(a_.budget() ? a_.max_batch_samples : a_.batch_size);
        std::vector<std::uint64_t> hashes;
        BatchCounts c;
        const RankTotals before = input_.totals();
        const auto t0 = Clock::now();
        const double cpu0 = process_cpu_seconds();
        auto range = input_.epoch(e);
        const std::uint64_t planned = input_.planned_steps(range);
        std::optional<ShuffleQuality> quality = input_.shuffle_quality();
        for (const HostBatch& batch : range) {
            c.add(batch, input_.oversize(range, batch));
            if (quality) quality->add(batch);
            progress_.step(e, first_step + c.batches, planned ? first_step + planned : 0,
                           epoch_progress(before, c.valid));
            for (std::size_t j = 0; (count || keep_ids) && j < batch.size(); ++j) {
                if (!batch.valid()[j]) continue;
                if (count) count->add(batch.index()[j]);
                if (keep_ids) ids.push_back(batch.index()[j]);
            }
            // Every rank yields the same steps, so every rank exchanges at the same one.
            if (count && c.batches % every == 0) count->exchange();
            if (Input::kRowContent && a_.verify) input_.collect(batch, hashes);
            input_.consume(batch);
            const auto compute = std::chrono::microseconds(a_.compute_ms * 1000 + a_.compute_us);
            if (compute.count() > 0) std::this_thread::sleep_for(compute);
            ++steps_;
            if (a_.save_every > 0 && steps_ % a_.save_every == 0) save(e, ids);
            if (a_.stop_after_steps > 0 && steps_ == a_.stop_after_steps) {
                // A stream's length is known only at its end: stopping there counts as stopped.
                stopped_ = planned == 0 || planned > c.batches;
                if (stopped_) break;
            }
        }
        if (input_.stopped(range)) {  // agreed: the same step on every rank
            stopped_ = true;
            signalled_ = true;
        }
        const auto elapsed = Clock::now() - t0;
        seconds_ += std::chrono::duration<double>(elapsed).count();
        cpu_seconds_ += process_cpu_seconds() - cpu0;
        const RankTotals after = input_.totals();
        progress_.epoch_done(e, c.batches, c.valid, after.bytes - before.bytes);
        totals_.batches += c.batches;
        totals_.samples += c.valid;
        totals_.padding_slots += c.padding_slots;
        EpochReport r = report(e, range, c, count ? &*count : nullptr, hashes, resumed);
        if (quality) r.shuffle = quality->finish(comm_);
        note_epoch_tier(comm_, input_.tier_stats(), elapsed, r);
        note_epoch_ranks(comm_, before, after, std::chrono::duration<double>(elapsed).count(), r);
        if (!a_.ids_out.empty()) {
            const std::vector<std::int64_t> all = gather_to_root(comm_, ids);
            delivered_.insert(delivered_.end(), all.begin(), all.end());
        }
        last_epoch_ = e;
        last_ids_ = std::move(ids);
        return r;
    }

    /// True once --stop-after-steps was reached inside an epoch, or after the last step.
    bool done() const noexcept {
        return stopped_ || (a_.stop_after_steps > 0 && steps_ >= a_.stop_after_steps);
    }
    bool stopped() const noexcept { return stopped_; }
    /// True when a --stop-signals signal (on any rank) ended the run; equal on every rank.
    bool signalled() const noexcept { return signalled_; }
    std::uint64_t saves() const noexcept { return saver_.saves(); }
    std::uint64_t steps() const noexcept { return steps_; }

    /// Collective: the final --save-state write; returns the final state.
    std::optional<SavedState> finish() {
        std::optional<SavedState> s = input_.snapshot();
        if (s && saver_.enabled()) saver_.save(comm_, *s, last_epoch_, last_ids_);
        return s;
    }

    /// Collective: this rank's totals of the run, of every rank.
    std::vector<RankTotals> gather_totals() const {
        RankTotals t = input_.totals();
        t.samples = totals_.samples;
        t.batches = totals_.batches;
        t.padding_slots = totals_.padding_slots;
        t.seconds = seconds_;
        t.cpu_seconds = cpu_seconds_;
        return gather_rank_totals(comm_, t);
    }

    /// Rank 0: the ids of every valid sample of the run (--ids-out), ascending.
    std::vector<std::int64_t> delivered() const {
        std::vector<std::int64_t> all = delivered_;
        std::sort(all.begin(), all.end());
        return all;
    }

private:
    // This rank's counts in the epoch so far, for the progress line (local).
    EpochProgress epoch_progress(const RankTotals& before, std::uint64_t samples) const {
        const RankTotals now = input_.totals();
        return {samples, now.bytes - before.bytes, now.wait_io_seconds - before.wait_io_seconds,
                now.wait_peers_seconds - before.wait_peers_seconds};
    }

    void save(std::uint64_t e, const std::vector<std::int64_t>& ids) {
        if (std::optional<SavedState> s = input_.snapshot()) saver_.save(comm_, *s, e, ids);
    }

    template <class Range>
    EpochReport report(std::uint64_t e, const Range& range, const BatchCounts& c, IdCount* count,
                       const std::vector<std::uint64_t>& hashes, bool resumed) {
        EpochReport r;
        if (!count) {
            r = count_epoch(comm_, e, c.batches);
        } else {
            // The interrupted run's ids count when they are known (a stream's state, a file
            // run's id log); without them only this run's part is checked.
            const bool with_prior = resumed && local_.prior_count > 0;
            const std::uint64_t prior = with_prior ? local_.prior_count : 0;
            Expectation x;
            x.num_samples = num_samples_;
            x.prior = with_prior ? &local_.prior_ids : nullptr;
            x.prior_count = prior;
            x.expected =
                stopped_ ? prior + comm_.allreduce_sum(c.valid) : input_.expected(range, prior);
            if (Input::kRowContent) {
                // Row identity: the contents delivered against the rows of the snapshot.
                x.content = true;
                x.positions = input_.dense_ids();
                x.partial = stopped_ || resumed;
                x.reference = &input_.reference(comm_);
            }
            r = verify_epoch(comm_, e, *count, c.batches, x, &hashes);
            r.prior_ids = prior;
        }
        r.resumed = resumed;
        r.interrupted = stopped_;
        input_.note_epoch(range, r);
        add_batch_counts(comm_, c, r);
        return r;
    }

    const Communicator& comm_;
    const StageArgs& a_;
    Input& input_;
    const LocalChecks& local_;
    std::uint64_t num_samples_;
    Progress& progress_;
    Checkpointer saver_;
    std::uint64_t steps_ = 0;
    bool stopped_ = false;
    bool signalled_ = false;
    std::uint64_t last_epoch_ = 0;
    std::vector<std::int64_t> last_ids_;
    RankTotals totals_;
    double seconds_ = 0;
    double cpu_seconds_ = 0;
    std::vector<std::int64_t> delivered_;
};

// Collective: stages every epoch of `input` and reports. Returns the exit code.
template <class Input>
int stage_input(const Communicator& comm, const StageArgs& a, const LocalChecks& local,
                Input& input, StageOutcome o) {
    o.world_size = comm.size();
    o.input_kind = input_kind_name(local.input.kind);
    input.describe(a, o);
    if (local.resume) {
        o.resumed_from = state_json(local.resume);
        o.resume_note = "resuming at " + state_note(*local.resume, o.num_samples);
    }
    if (comm.rank() == 0 && !a.quiet) print_header(a, o);

    Progress progress = Progress::for_rank(comm.rank(), a.quiet, a.progress,
                                           a.progress_every_seconds, a.first_epoch, a.epochs);
    StageRun<Input> run(comm, a, input, local, o.num_samples, progress);
    const std::uint64_t first = local.resume ? local.resume->epoch() : a.first_epoch;
    for (std::uint64_t e = first; e < a.first_epoch + a.epochs && !run.done(); ++e) {
        EpochReport r = run.stage_epoch(e);
        o.all_ok = o.all_ok && r.ok;
        o.epochs.push_back(std::move(r));
    }
    const std::optional<SavedState> saved = run.finish();
    o.state = state_json(saved);
    if (saved) o.state_note = state_note(*saved, o.num_samples);
    o.stopped_after = run.stopped() ? run.steps() : 0;
    if (run.signalled()) {  // the ranks that got the signal know which: the largest number
        o.stopped_by_signal = signal_name(static_cast<int>(
            comm.allreduce_max(static_cast<std::uint64_t>(std::max(0, stop_signal())))));
    }
    o.state_saves = run.saves();
    o.ranks = run.gather_totals();
    o.hosts = gather_host_names(comm);
    o.tier = gather_tier(comm, a.stage, input.tier_stats());
    o.tier.two_phase_option = a.two_phase;
    if (comm.rank() == 0 && !a.quiet) print_summary(a, o);
    run_agreed(comm, [&] {
        if (comm.rank() != 0) return;
        if (!a.ids_out.empty()) {
            std::string text;
            for (std::int64_t id : run.delivered()) text += std::to_string(id) + "\n";
            write_output_file(a.ids_out, text, "--ids-out file");
        }
        if (!a.json.empty()) write_stage_json(a, o);
        // Last: a job script that sees the marker finds the state and the report written.
        if (!a.stop_marker.empty() && !o.stopped_by_signal.empty()) {
            write_output_file(a.stop_marker,
                              "stopped by SIG" + o.stopped_by_signal + " after " +
                                  std::to_string(o.stopped_after) + " step(s); state: " +
                                  (a.save_state.empty() ? "(not saved)" : a.save_state) + "\n",
                              "--stop-marker file");
        }
    });
    if (a.verify && !o.all_ok) return 1;
    return run.signalled() ? kExitStopped : 0;
}

}  // namespace

int run_stage(Communicator& comm, const StageArgs& a) {
    // The watchdog is armed before the first collective: the agreement below waits for rank 0
    // reading a --resume state's id log, which must not outlast --timeout.
    const LocalChecks local = run_agreed_value(comm, [&] {
        comm.set_timeout(std::chrono::seconds(a.timeout_seconds));
        return check_locally(comm, a);
    });
    require_same(comm, stage_argument_values(a), "stage: ranks were given different arguments",
                 kSameCommandAdvice);
    // --timeout is agreed now: from here on every collective of the CLI's own communicator
    // (format agreement, opening, --verify and --json gathers) runs under the watchdog too.
    comm.set_timeout(std::chrono::seconds(a.timeout_seconds));
    // From here a --stop-signals signal stops the loader at its next agreed step (before the
    // loader exists: at its first one), for files and streams alike.
    run_agreed(comm, [&] { install_stop_signals(local.stop_signals); });
    StageOutcome o;
    for (const int s : local.stop_signals) o.stop_signals.push_back(signal_name(s));
    if (a.stream()) {
        StreamInput input(comm, a, local.resume);
        return stage_input(comm, a, local, input, std::move(o));
    }
    require_same_format(comm, a, local.format);
    const auto source = open_source(comm, a, local.format);
    o.fields = source->fields();
    o.source = source->statistics();
    o.source_notes = source->notes();
    FileInput input(comm, *source, a, local.resume, local.input.kind);
    return stage_input(comm, a, local, input, std::move(o));
}

}  // namespace mpistage::cli
