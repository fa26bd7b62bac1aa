// Loader::state and Loader::restore: the sample sequence is a function of (dataset, seed,
// epoch, options), so the state is where the job stands in it (docs/resume.md).
#include "comm/agree.hpp"
#include "loader/fingerprint.hpp"
#include "loader/loader_impl.hpp"
#include "loader/state_check.hpp"
#include "loader/stream/stream_engine.hpp"
#include "plan/consumed_digest.hpp"

namespace mpistage {

namespace {

std::uint64_t skipped_records_of(const Source& source) {
    for (const SourceStatistic& s : source.statistics()) {
        if (s.name == "skipped_records") return s.value;
    }
    return 0;
}

// "option 'seed' of the saved state is 7 but the loader was given 8".
void require_option(bool same, const char* name, const std::string& saved, const std::string& given,
                    const std::string& origin) {
    if (same) return;
    throw ConfigError("loader: cannot resume from " + origin + ": option '" + name +
                      "' of the saved state is " + saved + " but the loader was given " + given +
                      " (the sample sequence depends on it)");
}

// The options that decide the sequence, as saved in `state`, against the loader's `o`.
bool o_is_chunks(const PlanOptions& o) {
    return o.shuffle == Shuffle::chunks;
}

void require_same_sequence(const LoaderState& state, const PlanOptions& o, int world_size) {
    const std::string origin = "the saved state";
    const PlanOptions& s = state.plan;
    require_option(s.seed == o.seed, "seed", std::to_string(s.seed), std::to_string(o.seed),
                   origin);
    require_option(s.sharding == o.sharding, "sharding", to_string(s.sharding),
                   to_string(o.sharding), origin);
    require_option(s.shuffle == o.shuffle, "shuffle", to_string(s.shuffle), to_string(o.shuffle),
                   origin);
    require_option(s.remainder == o.remainder, "remainder", to_string(s.remainder),
                   to_string(o.remainder), origin);
    require_option(s.chunk_samples == o.chunk_samples, "chunk_samples",
                   std::to_string(s.chunk_samples), std::to_string(o.chunk_samples), origin);
    require_option(s.window_chunks == o.window_chunks, "window_chunks",
                   std::to_string(s.window_chunks), std::to_string(o.window_chunks), origin);
    require_option(s.budget.describe() == o.budget.describe(), "budget",
                   s.budget.active() ? s.budget.describe() : "none",
                   o.budget.active() ? o.budget.describe() : "none", origin);
    if (o.sharding == Sharding::byte_range) {
        if (!o.budget.active()) {
            require_option(s.batch_size == o.batch_size, "batch_size", std::to_string(s.batch_size),
                           std::to_string(o.batch_size), origin);
        }
        if (state.world_size != world_size) {
            throw ConfigError(
                "loader: cannot resume: the state was saved by " +
                std::to_string(state.world_size) +
                " ranks with byte_range sharding, whose "
                "shards depend on the world size; this job has " +
                std::to_string(world_size) +
                " ranks (resume at the same world size, or use global sharding, which "
                "resumes at any world size)");
        }
    }
}

}  // namespace

void Loader::Impl::apply_resume(const LoaderState& state) {
    require_same(comm, {{"saved state", state.to_json()}},
                 "loader: the saved state differs across ranks",
                 "every rank must restore the same state (read the same file)");
    // The dataset is compared at the level the state was saved with (collective: every rank
    // holds the same state, so every rank computes the same level).
    const std::string fingerprint =
        state.fingerprint_level == options.safety.fingerprint
            ? dataset_fingerprint
            : detail::dataset_fingerprint(comm, source, num_samples, skipped_records,
                                          state.fingerprint_level);
    EpochPlan rest;  // budget batches: this rank's plan from the state's point
    run_agreed(comm, [&] {
        if (epoch_active || progress.started) {
            throw ConfigError("loader: restore must come before the first epoch");
        }
        if (state.consumed_digest.empty() && !options.safety.accept_legacy_state) {
            throw ConfigError(
                "loader: cannot resume: the saved state has no 'consumed_digest' (format "
                "version 1 to 3, or the key was removed), so which samples it consumed cannot "
                "be checked: an edited epoch or steps would resume silently wrong. Resume from "
                "a state saved by this version, or accept it knowingly (LoaderOptions::"
                "accept_legacy_state, Python accept_legacy_state=True, CLI "
                "--accept-legacy-state)");
        }
        if (state.dataset_fingerprint != fingerprint || state.num_samples != num_samples ||
            state.skipped_records != skipped_records) {
            throw ConfigError(
                "loader: cannot resume: the saved state is from another dataset (state: N=" +
                std::to_string(state.num_samples) + ", skipped records " +
                std::to_string(state.skipped_records) + ", fingerprint " +
                state.dataset_fingerprint + " (" + to_string(state.fingerprint_level) +
                "); opened source: N=" + std::to_string(num_samples) + ", skipped records " +
                std::to_string(skipped_records) + ", fingerprint " + fingerprint + " (" +
                to_string(state.fingerprint_level) +
                "); docs/resume.md, \"Fingerprint levels\", says what each level compares)");
        }
        // Stage auto chooses between the global and the chunk order by the data per rank
        // against the budget, which changes with W: a resume keeps the saved job's choice.
        const bool auto_order =
            options.tier.stage == Stage::automatic && requested_shuffle == Shuffle::global;
        const Shuffle saved = state.plan.shuffle;
        if (auto_order && saved != options.plan.shuffle &&
            (saved == Shuffle::global || saved == Shuffle::chunks)) {
            options.plan.shuffle = saved;
            chunk_samples_derived = window_chunks_derived = saved == Shuffle::chunks;
            options.plan.chunk_samples = 0;
            options.plan.window_chunks = 0;
            stats.shuffle_note = "resumed in shuffle '" + to_string(saved) +
                                 "', which stage auto chose for the saved job";
            if (saved == Shuffle::chunks) chunk_note_prefix = stats.shuffle_note + "; ";
        }
        // Sizes derived from this job's budget: the saved epoch's order keeps the saved ones.
        if (state.plan.shuffle == Shuffle::chunks) {
            if (chunk_samples_derived) options.plan.chunk_samples = state.plan.chunk_samples;
            if (window_chunks_derived) options.plan.window_chunks = state.plan.window_chunks;
            if (chunk_samples_derived || window_chunks_derived) {
                chunk_sizes_resumed = true;
                describe_chunk_shuffle();
            }
        }
        require_same_sequence(state, options.plan, comm.size());
        // The state's numbers against each other (at the world size that saved it), then
        // the resume point inside the epoch at this world size (the planner throws
        // otherwise; with a budget also when it is not the end of a batch).
        detail::check_resume_point(state, sample_bytes, sample_tokens);
        const EpochStart start{state.steps_consumed, state.samples_consumed,
                               state.order_world_size};
        if (options.plan.budget.active()) {
            rest = plan_of(state.epoch, start);
        } else {
            (void)plan_totals(num_samples, comm.size(), options.plan, start);
        }
    });
    // Last, the samples the keys select against the digest of those the saving job consumed:
    // catches keys edited consistently with each other (epoch, steps with samples, seed).
    LoaderState kept = state;
    check_consumed_digest(kept, options.plan.budget.active() ? &rest : nullptr);
    resume = kept;
}

EpochStart Loader::Impl::start_of(std::uint64_t e) const {
    if (!resume || resume->epoch != e) return {};
    return {resume->steps_consumed, resume->samples_consumed, resume->order_world_size};
}

Loader Loader::restore(CommRef comm, const Source& source, LoaderOptions options,
                       const LoaderState& state) {
    Loader loader(comm, source, std::move(options));
    loader.impl_->comm.set_context({"loader: restore", static_cast<std::int64_t>(state.epoch),
                                    static_cast<std::int64_t>(state.steps_consumed), "", -1});
    loader.impl_->apply_resume(state);
    return loader;
}

LoaderState Loader::state() const {
    if (stream_) return stream_->state();
    const Impl& d = *impl_;
    if (d.diverged) throw ConfigError(d.divergence + " (no state is the same on every rank)");
    LoaderState s;
    s.consumed_digest = detail::digest_to_hex(detail::consumed_digest_seed(0));
    s.dataset_fingerprint = d.dataset_fingerprint;
    s.num_samples = d.num_samples;
    s.skipped_records = d.skipped_records;
    s.fingerprint_level = d.options.safety.fingerprint;
    s.plan = d.options.plan;
    s.world_size = d.comm.size();
    // Shuffle::chunks: order_world_size is 0 at an epoch's start (the next epoch is made for
    // whatever world size starts it) and, inside an epoch, the world size of its first run.
    if (!d.progress.started) {
        // Nothing consumed since the restore: the job stands where the state says (its world
        // size included: the steps it counts were made there).
        if (d.resume) return *d.resume;
        return s;
    }
    const Impl::Progress& p = d.progress;
    if (p.consumed >= p.steps) {  // the epoch was consumed to its end
        s.epoch = p.epoch + 1;
        s.consumed_digest = detail::digest_to_hex(detail::consumed_digest_seed(s.epoch));
        return s;
    }
    s.epoch = p.epoch;
    s.consumed_digest = detail::digest_to_hex(p.digest());
    s.steps_consumed = p.start.step + p.consumed;
    s.run_start_steps = p.start.step;  // this run's steps were all at this world size
    s.run_start_samples = p.start.position;
    if (o_is_chunks(d.options.plan)) {
        s.order_world_size =
            p.start.order_world_size > 0 ? p.start.order_world_size : d.comm.size();
    }
    const PlanOptions& o = d.options.plan;
    if (!p.job_samples_before.empty()) {  // budget batches: counted by the plan
        s.samples_consumed = p.job_samples_before[p.consumed];
    } else if (o.sharding == Sharding::global) {
        const std::uint64_t width = static_cast<std::uint64_t>(d.comm.size()) * o.batch_size;
        s.samples_consumed = std::min(d.num_samples, p.start.position + p.consumed * width);
    } else {
        const std::uint64_t all = plan_totals(d.num_samples, d.comm.size(), o).valid_samples;
        const std::uint64_t left =
            plan_totals(d.num_samples, d.comm.size(), o, {s.steps_consumed, 0}).valid_samples;
        s.samples_consumed = all - left;
    }
    return s;
}

void Loader::Impl::record_identity() {
    skipped_records = skipped_records_of(source);
    dataset_fingerprint = detail::dataset_fingerprint(comm, source, num_samples, skipped_records,
                                                      options.safety.fingerprint);
}

}  // namespace mpistage
