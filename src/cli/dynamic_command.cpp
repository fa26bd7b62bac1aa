// `mpistage stage FILE --batch-bytes N` (or --batch-tokens N): stage file inputs in batches
// sized by a budget, equal steps on every rank, with steps, samples per batch, oversize batches
// and padding waste in the report; --verify checks every sample exactly once per epoch.
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/args.hpp"
#include "cli/dynamic_args.hpp"
#include "cli/dynamic_report.hpp"
#include "cli/format_flags.hpp"
#include "cli/open_source.hpp"
#include "cli/report.hpp"
#include "cli/stream_args.hpp"
#include "comm/agree.hpp"
#include "mpistage/config.hpp"
#include "mpistage/dynamic_loader.hpp"

namespace mpistage::cli {

namespace {

// Local: flags of file staging that dynamic batching does not have.
// @throws ConfigError naming the flag.
void refuse_flags(const DynamicStageArgs& d, const StageArgs& a) {
    const char* const why =
        " does not combine with --batch-bytes/--batch-tokens (dynamic "
        "batching of FILE input; see README, Dynamic batching)";
    auto refuse = [&](const std::string& flag) { throw ConfigError("stage: " + flag + why); };
    if (a.balance_steps) refuse("--balance-steps");
    if (a.stage != "none") refuse("--stage " + a.stage);
    for (const char* flag : {"--batch-size", "--remainder", "--save-state", "--save-every",
                             "--stop-after-steps", "--resume", "--prefetch", "--threads",
                             "--verify-files", "--stage-budget", "--stage-ranks-per-node"}) {
        if (d.given(flag)) refuse(flag);
    }
    if (a.device != "auto" && a.device != "cpu") refuse("--device " + a.device);
    if (d.batch_tokens == 0 && (d.given("--token-field")))
        refuse("--token-field without --batch-tokens");
}

struct DynamicLocal {
    std::string format;
    DynamicLoaderOptions options;
};

// Local: checks before any collective that depends on the arguments.
DynamicLocal check_dynamic_locally(const Communicator& comm, const DynamicStageArgs& d,
                                   const StreamStageArgs& s, const StageArgs& a) {
    refuse_flags(d, a);
    probe_stage_inputs(a);
    if (!a.json.empty() && comm.rank() == 0) check_json_destination(a.json);
    DynamicLocal c;
    c.format = detect_format(a);
    check_flags_apply(a, c.format);
    c.options.plan.seed = a.seed;
    c.options.plan.shuffle = parse_shuffle(a.shuffle);
    c.options.plan.sharding = parse_sharding(a.sharding);
    c.options.batching.batch_bytes = s.batch_bytes;
    c.options.batching.batch_tokens = d.batch_tokens;
    c.options.batching.max_batch_samples = s.max_batch_samples;
    c.options.batching.bucket_window = d.bucket_window;
    c.options.timeout = std::chrono::seconds(a.timeout_seconds);
    c.options.validate();
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

/// One epoch on this rank: what it yielded.
struct DynamicEpochRun {
    std::vector<std::int64_t> ids;
    std::uint64_t steps = 0;
};

DynamicEpochRun run_epoch(DynamicLoader& loader, std::uint64_t e, const StageArgs& a,
                          DynamicRankTotals& t) {
    DynamicEpochRun run;
    loader.start_epoch(e);
    const auto t0 = std::chrono::steady_clock::now();
    HostBatch b;
    while (loader.next(b)) {
        ++run.steps;
        if (b.num_valid() > 0) {
            t.min_samples = t.min_samples == 0
                                ? b.num_valid()
                                : std::min<std::uint64_t>(t.min_samples, b.num_valid());
            t.max_samples = std::max<std::uint64_t>(t.max_samples, b.num_valid());
        }
        for (std::size_t j = 0; a.verify && j < b.size(); ++j) {
            if (b.valid()[j]) run.ids.push_back(b.index()[j]);
        }
        if (a.compute_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.compute_ms));
    }
    t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return run;
}

std::vector<NamedValue> dynamic_values(const DynamicStageArgs& d, const StreamStageArgs& s) {
    return {{"--batch-bytes", std::to_string(s.batch_bytes)},
            {"--max-batch-samples", std::to_string(s.max_batch_samples)},
            {"--batch-tokens", std::to_string(d.batch_tokens)},
            {"--token-field", d.token_field},
            {"--bucket-window", std::to_string(d.bucket_window)}};
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
        run_agreed(comm,
                   [&] { local.options.token_field = token_field_index(*source, d.token_field); });
    }
    DynamicLoader loader(comm, *source, local.options);
    DynamicOutcome o;
    o.world_size = comm.size();
    o.num_samples = loader.num_samples();
    o.batching = local.options.batching;
    o.unit = d.batch_tokens > 0 ? "tokens" : "bytes";
    if (comm.rank() == 0 && !a.quiet) {
        std::printf("stage %s: %llu samples, %d ranks, dynamic batches: %s\n",
                    join_words(a.files).c_str(), static_cast<unsigned long long>(o.num_samples),
                    comm.size(), o.batching.describe().c_str());
    }
    DynamicRankTotals mine;
    for (std::uint64_t e = a.first_epoch; e < a.first_epoch + a.epochs; ++e) {
        const DynamicEpochRun run = run_epoch(loader, e, a, mine);
        DynamicEpochReport r;
        Expectation x;
        x.num_samples = o.num_samples;
        x.expected = o.num_samples;
        r.base = a.verify ? verify_epoch(comm, e, run.ids, run.steps, x)
                          : count_epoch(comm, e, run.steps);
        add_plan_totals(r, loader.plan());
        r.mean_samples =
            r.batches ? static_cast<double>(o.num_samples) / static_cast<double>(r.batches) : 0.0;
        o.all_ok = o.all_ok && r.base.ok;
        o.epochs.push_back(std::move(r));
    }
    const DynamicLoaderStats& st = loader.stats();
    mine.samples = st.valid_samples;
    mine.batches = st.batches;
    mine.padding_steps = st.padding_steps;
    mine.bytes = st.bytes_read;
    mine.oversize = st.oversize_batches;
    o.ranks = gather_dynamic_totals(comm, mine);
    if (comm.rank() == 0 && !a.quiet) print_dynamic_report(o, a.verify);
    run_agreed(comm, [&] {
        if (!a.json.empty() && comm.rank() == 0) {
            write_dynamic_json(a.json, o, a.verify, a.shuffle, a.sharding);
        }
    });
    return a.verify && !o.all_ok ? 1 : 0;
}

}  // namespace mpistage::cli
