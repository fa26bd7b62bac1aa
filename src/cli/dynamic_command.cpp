// `mpistage stage FILE --batch-bytes N` (or --batch-tokens N): stage file inputs in batches
// sized by a budget, served by the one Loader (its prefetch ring, I/O threads, memory tier and
// state), equal steps on every rank, with steps, samples per batch, oversize batches and
// padding waste in the report; --verify checks every sample exactly once per epoch (across an
// interrupted run too, with --save-state/--resume).
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "cli/args.hpp"
#include "cli/atomic_file.hpp"
#include "cli/checkpoint.hpp"
#include "cli/commands.hpp"
#include "cli/dynamic_args.hpp"
#include "cli/dynamic_report.hpp"
#include "cli/format_flags.hpp"
#include "cli/open_source.hpp"
#include "cli/report.hpp"
#include "cli/stream_args.hpp"
#include "mpistage/config.hpp"
#include "mpistage/loader.hpp"
#if MPISTAGE_HAVE_TORCH
#include "mpistage/torch.hpp"
#endif

namespace mpistage::cli {

namespace {

// Local: flags of file staging that budget batches do not have.
// @throws ConfigError naming the flag.
void refuse_flags(const DynamicStageArgs& d, const StageArgs& a) {
    const char* const why =
        " does not combine with --batch-bytes/--batch-tokens (budget batches of FILE input; "
        "see README, Dynamic batching)";
    auto refuse = [&](const std::string& flag) { throw ConfigError("stage: " + flag + why); };
    if (a.balance_steps) refuse("--balance-steps");
    if (a.two_phase) refuse("--two-phase");
    for (const char* flag : {"--batch-size", "--remainder"}) {
        if (d.given(flag)) refuse(flag);
    }
    if (a.device != "auto" && a.device != "cpu") refuse("--device " + a.device);
    if (d.batch_tokens == 0 && (d.given("--token-field")))
        refuse("--token-field without --batch-tokens");
}

struct DynamicLocal {
    std::string format;
    LoaderOptions options;
    /// --resume: the saved state (every rank reads it; the loader checks they agree).
    std::optional<SavedState> resume;
    /// Rank 0 with --verify: the ids the resumed epoch consumed before (its id log).
    std::vector<std::int64_t> prior_ids;
};

// Local: checks before any collective that depends on the arguments.
DynamicLocal check_dynamic_locally(const Communicator& comm, const DynamicStageArgs& d,
                                   const StreamStageArgs& s, const StageArgs& a) {
    refuse_flags(d, a);
    if (a.save_every > 0 && a.save_state.empty()) {
        throw ConfigError("stage: --save-every needs --save-state FILE");
    }
    probe_stage_inputs(a);
    if (!a.json.empty() && comm.rank() == 0) check_json_destination(a.json);
    if (!a.save_state.empty() && comm.rank() == 0) {
        check_destination(a.save_state, "--save-state file");
    }
    DynamicLocal c;
    c.format = detect_format(a);
    check_flags_apply(a, c.format);
    c.options = loader_options(a);
    c.options.plan.budget.batch_bytes = s.batch_bytes;
    c.options.plan.budget.batch_tokens = d.batch_tokens;
    c.options.plan.budget.max_batch_samples = s.max_batch_samples;
    c.options.plan.budget.bucket_window = d.bucket_window;
    c.options.validate();
    if (!a.resume.empty()) {
        c.resume = read_saved_state(a.resume);
        if (a.verify && comm.rank() == 0) c.prior_ids = read_id_log(*c.resume);
    }
    return c;
}

// Local: index of the token field (--token-field, else the only ragged field).
std::size_t token_field_index(const Source& source, const std::string& name) {
    const auto& fields = source.fields();
    std::string ragged;
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].name == name) return f;
        if (fields[f].ragged) ragged += (ragged.empty() ? "'" : ", '") + fields[f].name + "'";
    }
    for (std::size_t f = 0; name.empty() && f < fields.size(); ++f) {
        if (fields[f].ragged) return f;
    }
    throw ConfigError("stage: --token-field '" + name + "' is not a field of the input (ragged " +
                      "fields: " + (ragged.empty() ? std::string("none") : ragged) + ")");
}

/// This run's steps over all epochs and where --stop-after-steps stopped it.
struct RunProgress {
    std::uint64_t steps = 0;
    bool stopped = false;
    std::uint64_t last_epoch = 0;
    std::vector<std::int64_t> last_ids;
};

/// Collective: one epoch (or the rest of a resumed one) on this rank, with its report.
DynamicEpochReport run_epoch(const Communicator& comm, Loader& loader, std::uint64_t e,
                             const StageArgs& a, const DynamicLocal& local, Checkpointer& saver,
                             RunProgress& run, DynamicRankTotals& t) {
    const bool resumed =
        local.resume && local.resume->loader.epoch == e && local.resume->loader.steps_consumed > 0;
    std::vector<std::int64_t> ids;
    std::uint64_t batches = 0;
    const auto t0 = std::chrono::steady_clock::now();
    EpochRange range = loader.epoch(e);
    HostBatch b;
    while (range.next(b)) {
        ++batches;
#if MPISTAGE_HAVE_TORCH
        const TorchBatch tb = to_torch(b);
        if (tb.index.size(0) != static_cast<std::int64_t>(b.size())) {
            throw Error("stage: batch tensor has " + std::to_string(tb.index.size(0)) + " rows");
        }
#endif
        if (b.num_valid() > 0) {
            t.min_samples = t.min_samples == 0
                                ? b.num_valid()
                                : std::min<std::uint64_t>(t.min_samples, b.num_valid());
            t.max_samples = std::max<std::uint64_t>(t.max_samples, b.num_valid());
        }
        for (std::size_t j = 0; a.verify && j < b.size(); ++j) {
            if (b.valid()[j]) ids.push_back(b.index()[j]);
        }
        const auto compute = std::chrono::microseconds(a.compute_ms * 1000 + a.compute_us);
        if (compute.count() > 0) std::this_thread::sleep_for(compute);
        ++run.steps;
        if (a.save_every > 0 && run.steps % a.save_every == 0) {
            saver.save(comm, loader.state(), e, ids);
        }
        if (a.stop_after_steps > 0 && run.steps == a.stop_after_steps) {
            run.stopped = range.steps() > batches;
            if (run.stopped) break;
        }
    }
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    DynamicEpochReport r;
    // The interrupted run's ids count when it kept a log (its count is in the state file).
    const bool with_prior = resumed && !local.resume->ids_path.empty();
    const std::uint64_t prior = with_prior ? local.resume->ids_count : 0;
    Expectation x;
    x.num_samples = loader.num_samples();
    x.prior = with_prior ? &local.prior_ids : nullptr;
    x.expected =
        run.stopped ? prior + comm.allreduce_sum(ids.size()) : prior + range.totals().valid_samples;
    r.base = a.verify ? verify_epoch(comm, e, ids, batches, x) : count_epoch(comm, e, batches);
    r.base.prior_ids = a.verify ? prior : 0;
    r.base.resumed = resumed;
    r.base.interrupted = run.stopped;
    add_plan_totals(r, range.plan());
    r.mean_samples =
        r.batches ? static_cast<double>(x.num_samples) / static_cast<double>(r.batches) : 0.0;
    run.last_epoch = e;
    run.last_ids = std::move(ids);
    return r;
}

std::vector<NamedValue> dynamic_values(const DynamicStageArgs& d, const StreamStageArgs& s) {
    return {{"--batch-bytes", std::to_string(s.batch_bytes)},
            {"--max-batch-samples", std::to_string(s.max_batch_samples)},
            {"--batch-tokens", std::to_string(d.batch_tokens)},
            {"--token-field", d.token_field},
            {"--bucket-window", std::to_string(d.bucket_window)}};
}

Loader open_loader(const Communicator& comm, const Source& source, const DynamicLocal& local) {
    if (!local.resume) return Loader(comm, source, local.options);
    return Loader::restore(comm, source, local.options, local.resume->loader);
}

}  // namespace

int run_dynamic_stage(Communicator& comm, const DynamicStageArgs& d, const StreamStageArgs& s,
                      const StageArgs& a) {
    DynamicLocal local =
        run_agreed_value(comm, [&] { return check_dynamic_locally(comm, d, s, a); });
    std::vector<NamedValue> same = stage_argument_values(a);
    for (auto& v : dynamic_values(d, s)) same.push_back(std::move(v));
    require_same(comm, same, "stage: ranks were given different arguments", kSameCommandAdvice);
    comm.set_timeout(local.options.timeout);
    require_same_format(comm, a, local.format);
    const auto source = open_source(comm, a, local.format);
    if (d.batch_tokens > 0) {
        run_agreed(comm, [&] {
            local.options.plan.budget.token_field = token_field_index(*source, d.token_field);
        });
    }
    Loader loader = open_loader(comm, *source, local);
    DynamicOutcome o;
    o.world_size = comm.size();
    o.num_samples = loader.num_samples();
    o.batching = local.options.plan.budget;
    o.unit = d.batch_tokens > 0 ? "tokens" : "bytes";
    if (comm.rank() == 0 && !a.quiet) {
        std::printf("stage %s: %llu samples, %d ranks, dynamic batches: %s, tier %s\n",
                    join_words(a.files).c_str(), static_cast<unsigned long long>(o.num_samples),
                    comm.size(), o.batching.describe().c_str(), loader.stats().tier.c_str());
    }
    Checkpointer saver(a.save_state, a.verify,
                       local.resume ? local.resume->loader.epoch : a.first_epoch, local.prior_ids);
    RunProgress run;
    DynamicRankTotals mine;
    const std::uint64_t first = local.resume ? local.resume->loader.epoch : a.first_epoch;
    for (std::uint64_t e = first; e < a.first_epoch + a.epochs; ++e) {
        if (run.stopped || (a.stop_after_steps > 0 && run.steps >= a.stop_after_steps)) break;
        DynamicEpochReport r = run_epoch(comm, loader, e, a, local, saver, run, mine);
        o.all_ok = o.all_ok && r.base.ok;
        o.epochs.push_back(std::move(r));
    }
    saver.save(comm, loader.state(), run.last_epoch, run.last_ids);
    const LoaderStats& st = loader.stats();
    mine.samples = st.valid_samples;
    mine.batches = st.batches;
    mine.padding_steps = st.padding_slots;  // one masked slot per padding batch
    mine.bytes = st.bytes_read;
    mine.oversize = st.oversize_batches;
    o.ranks = gather_dynamic_totals(comm, mine);
    if (comm.rank() == 0 && !a.quiet) {
        print_dynamic_report(o, a.verify);
        if (run.stopped) {
            std::printf("stopped after %llu steps (--stop-after-steps)%s\n",
                        static_cast<unsigned long long>(run.steps),
                        a.save_state.empty() ? "" : "; state saved");
        }
    }
    run_agreed(comm, [&] {
        if (!a.json.empty() && comm.rank() == 0) {
            write_dynamic_json(a.json, o, a.verify, a.shuffle, a.sharding);
        }
    });
    return a.verify && !o.all_ok ? 1 : 0;
}

}  // namespace mpistage::cli
