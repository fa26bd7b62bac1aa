// `mpistage stage`: agree on the arguments and the source, stage every epoch (saving and
// resuming the loader state on request), report.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "cli/atomic_file.hpp"
#include "cli/checkpoint.hpp"
#include "cli/commands.hpp"
#include "cli/format_flags.hpp"
#include "cli/open_source.hpp"
#include "cli/progress.hpp"
#include "cli/report.hpp"
#include "cli/stage_device.hpp"
#include "cli/verify.hpp"
#include "comm/agree.hpp"
#include "mpistage/config.hpp"
#include "mpistage/loader.hpp"

namespace mpistage::cli {

namespace {

LoaderOptions loader_options(const StageArgs& a) {
    LoaderOptions o;
    o.plan.batch_size = a.batch_size;
    o.plan.seed = a.seed;
    o.plan.shuffle = parse_shuffle(a.shuffle);
    o.plan.sharding = parse_sharding(a.sharding);
    o.plan.remainder = parse_remainder(a.remainder);
    o.plan.balance_steps = a.balance_steps;
    o.prefetch = a.prefetch;
    o.io_threads = a.threads;
    o.timeout = std::chrono::seconds(a.timeout_seconds);
    o.verify_files = a.verify_files;
    o.device = a.device;
    o.log_device_fallback = !a.quiet;
    o.stage = parse_stage(a.stage);
    o.stage_budget_bytes = a.stage_budget;
    o.stage_ranks_per_node =
        static_cast<int>(std::min<std::uint64_t>(a.stage_ranks_per_node, 1 << 30));
    o.two_phase = a.two_phase;
    return o;
}

struct LocalChecks {
    std::string format;
    LoaderOptions options;
    /// --resume: the saved state (every rank reads it; the loader checks they agree).
    std::optional<SavedState> resume;
    /// Rank 0 with --verify: the ids the resumed epoch consumed before (its id log).
    std::vector<std::int64_t> prior_ids;
};

// Local: everything that can be checked on one rank before any collective that depends on
// the arguments. Probes each input before anything opens it (a FIFO would block open()).
LocalChecks check_locally(const Communicator& comm, const StageArgs& a) {
    if (a.first_epoch + a.epochs < a.first_epoch) {
        throw ConfigError("stage: --first-epoch + --epochs overflows 64 bits");
    }
    if (a.save_every > 0 && a.save_state.empty()) {
        throw ConfigError("stage: --save-every needs --save-state FILE");
    }
    probe_stage_inputs(a);
    if (!a.json.empty() && comm.rank() == 0) check_json_destination(a.json);
    if (!a.save_state.empty() && comm.rank() == 0) check_destination(a.save_state, "--save-state file");
    LocalChecks c;
    c.options = loader_options(a);
    c.format = detect_format(a);
    check_flags_apply(a, c.format);
    if (!a.resume.empty()) {
        c.resume = read_saved_state(a.resume);
        if (a.verify && comm.rank() == 0) c.prior_ids = read_id_log(*c.resume);
    }
    return c;
}

/// One run of `mpistage stage`: the epochs, the steps taken, where to stop and save.
class StageRun {
public:
    StageRun(const Communicator& comm, const StageArgs& a, Loader& loader, LocalChecks& local,
             BatchStaging& staging, Progress& progress)
        : comm_(comm), a_(a), loader_(loader), local_(local), staging_(staging),
          progress_(progress),
          saver_(a.save_state, a.verify,
                 local.resume ? local.resume->loader.epoch : a.first_epoch, local.prior_ids) {}

    /// Collective: stages epoch `e` (or the rest of it, when resumed); with --verify, checks it
    /// exactly once (across the interrupted run too, when its id log exists).
    EpochReport stage_epoch(std::uint64_t e) {
        const bool resumed = local_.resume && local_.resume->loader.epoch == e &&
                             local_.resume->loader.steps_consumed > 0;
        std::vector<std::int64_t> valid_ids;
        std::uint64_t batches = 0;
        EpochRange range = loader_.epoch(e);
        const LoaderStats before = loader_.stats();
        HostBatch batch;
        while (range.next(batch)) {
            ++batches;
            progress_.step(e, range.plan().first_step + batches,
                           range.plan().first_step + range.steps());
            consume(batch, valid_ids);
            ++steps_;
            if (a_.save_every > 0 && steps_ % a_.save_every == 0) {
                saver_.save(comm_, loader_.state(), e, valid_ids);
            }
            if (a_.stop_after_steps > 0 && steps_ == a_.stop_after_steps) {
                stopped_ = range.steps() > batches;
                if (stopped_) break;
            }
        }
        const LoaderStats& after = loader_.stats();
        progress_.epoch_done(e, after.batches - before.batches,
                             after.valid_samples - before.valid_samples,
                             after.bytes_read - before.bytes_read);
        EpochReport r = report(e, range, batches, valid_ids, resumed);
        last_epoch_ = e;
        last_ids_ = std::move(valid_ids);
        return r;
    }

    /// True once --stop-after-steps was reached inside an epoch, or after the last step.
    bool done() const noexcept {
        return stopped_ || (a_.stop_after_steps > 0 && steps_ >= a_.stop_after_steps);
    }
    bool stopped() const noexcept { return stopped_; }
    std::uint64_t steps() const noexcept { return steps_; }

    /// Collective: the final --save-state write.
    void save_final() { saver_.save(comm_, loader_.state(), last_epoch_, last_ids_); }

private:
    void consume(const HostBatch& batch, std::vector<std::int64_t>& valid_ids) {
        staging_.add(batch);
        if (batch.size() != a_.batch_size) {
            throw Error("stage: batch has " + std::to_string(batch.size()) + " rows");
        }
        if (a_.verify) {
            for (std::size_t j = 0; j < batch.size(); ++j) {
                if (batch.valid()[j]) valid_ids.push_back(batch.index()[j]);
            }
        }
        const auto compute = std::chrono::microseconds(a_.compute_ms * 1000 + a_.compute_us);
        if (compute.count() > 0) std::this_thread::sleep_for(compute);
    }

    EpochReport report(std::uint64_t e, const EpochRange& range, std::uint64_t batches,
                       const std::vector<std::int64_t>& ids, bool resumed) {
        EpochReport r;
        if (!a_.verify) {
            r = count_epoch(comm_, e, batches);
        } else {
            // The interrupted run's ids count when it kept a log (its count is in the state
            // file, which every rank read); without one only this run's part is checked.
            const bool with_prior = resumed && !local_.resume->ids_path.empty();
            const std::uint64_t prior = with_prior ? local_.resume->ids_count : 0;
            Expectation x;
            x.num_samples = loader_.num_samples();
            x.prior = with_prior ? &local_.prior_ids : nullptr;
            x.expected = stopped_ ? prior + comm_.allreduce_sum(ids.size())
                                  : prior + range.totals().valid_samples;
            r = verify_epoch(comm_, e, ids, batches, x);
            r.prior_ids = prior;
        }
        r.resumed = resumed;
        r.interrupted = stopped_;
        const EpochPlan& p = range.plan();
        r.step_ratio_worst = p.worst_step_byte_ratio;
        r.step_ratio_mean = p.mean_step_byte_ratio;
        r.unbalanced_worst = p.unbalanced_worst_step_byte_ratio;
        r.unbalanced_mean = p.unbalanced_mean_step_byte_ratio;
        return r;
    }

    const Communicator& comm_;
    const StageArgs& a_;
    Loader& loader_;
    LocalChecks& local_;
    BatchStaging& staging_;
    Progress& progress_;
    Checkpointer saver_;
    std::uint64_t steps_ = 0;
    bool stopped_ = false;
    std::uint64_t last_epoch_ = 0;
    std::vector<std::int64_t> last_ids_;
};

Loader open_loader(const Communicator& comm, const Source& source, const LocalChecks& local) {
    if (!local.resume) return Loader(comm, source, local.options);
    return Loader::restore(comm, source, local.options, local.resume->loader);
}

}  // namespace

int run_stage(Communicator& comm, const StageArgs& a) {
    LocalChecks local = run_agreed_value(comm, [&] { return check_locally(comm, a); });
    require_same(comm, stage_argument_values(a), "stage: ranks were given different arguments",
                 kSameCommandAdvice);
    // --timeout is agreed now: from here on every collective of the CLI's own communicator
    // (format agreement, opening, --verify and --json gathers) runs under the watchdog too.
    comm.set_timeout(local.options.timeout);
    require_same_format(comm, a, local.format);

    const auto source = open_source(comm, a, local.format);
    Loader loader = open_loader(comm, *source, local);
    StageOutcome o;
    o.world_size = comm.size();
    o.num_samples = loader.num_samples();
    o.fields = source->fields();
    o.source = source->statistics();
    if (local.resume) o.resume = local.resume->loader;
    if (comm.rank() == 0 && !a.quiet) print_header(a, o);

    BatchStaging staging(loader);
    Progress progress = Progress::for_rank(comm.rank(), a.quiet, a.first_epoch, a.epochs);
    StageRun run(comm, a, loader, local, staging, progress);
    const std::uint64_t first = local.resume ? local.resume->loader.epoch : a.first_epoch;
    for (std::uint64_t e = first; e < a.first_epoch + a.epochs && !run.done(); ++e) {
        const auto t0 = std::chrono::steady_clock::now();
        EpochReport r = run.stage_epoch(e);
        note_epoch_tier(comm, loader.stats(), std::chrono::steady_clock::now() - t0, r);
        o.all_ok = o.all_ok && r.ok;
        o.epochs.push_back(std::move(r));
    }
    run.save_final();
    o.stopped_after = run.stopped() ? run.steps() : 0;
    o.saved = loader.state();
    o.ranks = gather_rank_totals(comm, loader.stats(), staging.stats());
    o.tier = gather_tier(comm, a.stage, loader.stats());
    o.tier.two_phase = a.two_phase;
    if (comm.rank() == 0 && !a.quiet) print_summary(a, o);
    run_agreed(comm, [&] {
        if (!a.json.empty() && comm.rank() == 0) write_stage_json(a, o);
    });
    return a.verify && !o.all_ok ? 1 : 0;
}

}  // namespace mpistage::cli
