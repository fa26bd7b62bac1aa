// `mpistage stage`: agree on the arguments and the source, stage every epoch, report.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/open_source.hpp"
#include "cli/report.hpp"
#include "cli/verify.hpp"
#include "mpistage/config.hpp"
#include "mpistage/loader.hpp"
#if MPISTAGE_HAVE_TORCH
#include "mpistage/torch.hpp"
#endif

namespace mpistage::cli {

namespace {

LoaderOptions loader_options(const StageArgs& a) {
    LoaderOptions o;
    o.plan.batch_size = a.batch_size;
    o.plan.seed = a.seed;
    o.plan.shuffle = parse_shuffle(a.shuffle);
    o.plan.sharding = parse_sharding(a.sharding);
    o.plan.remainder = parse_remainder(a.remainder);
    o.prefetch = a.prefetch;
    o.io_threads = a.threads;
    o.timeout = std::chrono::seconds(a.timeout_seconds);
    o.verify_files = a.verify_files;
    o.stage = parse_stage(a.stage);
    o.stage_budget_bytes = a.stage_budget;
    o.stage_ranks_per_node =
        static_cast<int>(std::min<std::uint64_t>(a.stage_ranks_per_node, 1 << 30));
    return o;
}

struct LocalChecks {
    std::string format;
    LoaderOptions options;
};

// Local: everything that can be checked on one rank before any collective that depends on
// the arguments. Probes each input before anything opens it (a FIFO would block open()).
LocalChecks check_locally(const Communicator& comm, const StageArgs& a) {
    if (a.first_epoch + a.epochs < a.first_epoch) {
        throw ConfigError("stage: --first-epoch + --epochs overflows 64 bits");
    }
    probe_stage_inputs(a);
    if (!a.json.empty() && comm.rank() == 0) check_json_destination(a.json);
    LocalChecks c;
    c.options = loader_options(a);
    c.format = detect_format(a);
    return c;
}

// Collective: stages one epoch; with --verify, checks it exactly once.
EpochReport stage_epoch(const Communicator& comm, Loader& loader, const StageArgs& a,
                        std::uint64_t epoch) {
    std::vector<std::int64_t> valid_ids;
    std::uint64_t batches = 0;
    for (const HostBatch& batch : loader.epoch(epoch)) {
        ++batches;
#if MPISTAGE_HAVE_TORCH
        const TorchBatch tb = to_torch(batch);
        if (tb.index.size(0) != static_cast<std::int64_t>(a.batch_size)) {
            throw Error("stage: batch tensor has " + std::to_string(tb.index.size(0)) + " rows");
        }
#endif
        if (!a.verify) continue;
        for (std::size_t j = 0; j < batch.size(); ++j) {
            if (batch.valid()[j]) valid_ids.push_back(batch.index()[j]);
        }
    }
    if (!a.verify) return count_epoch(comm, epoch, batches);
    const bool drop = loader.options().plan.remainder == Remainder::drop;
    return verify_epoch(comm, epoch, valid_ids, batches, loader.num_samples(), loader.totals(),
                        drop);
}

}  // namespace

int run_stage(Communicator& comm, const StageArgs& a) {
    const LocalChecks local = run_agreed_value(comm, [&] { return check_locally(comm, a); });
    require_same(comm, stage_argument_values(a), "stage: ranks were given different arguments",
                 kSameCommandAdvice);
    // --timeout is agreed now: from here on every collective of the CLI's own communicator
    // (format agreement, opening, --verify and --json gathers) runs under the watchdog too.
    comm.set_timeout(local.options.timeout);
    require_same_format(comm, a, local.format);

    const auto source = open_source(comm, a, local.format);
    Loader loader(comm, *source, local.options);
    StageOutcome o;
    o.world_size = comm.size();
    o.num_samples = loader.num_samples();
    o.fields = source->fields();
    o.source = source->statistics();
    if (comm.rank() == 0 && !a.quiet) print_header(a, o);

    for (std::uint64_t e = a.first_epoch; e < a.first_epoch + a.epochs; ++e) {
        const auto t0 = std::chrono::steady_clock::now();
        EpochReport r = stage_epoch(comm, loader, a, e);
        note_epoch_tier(comm, loader.stats(), std::chrono::steady_clock::now() - t0, r);
        o.all_ok = o.all_ok && r.ok;
        o.epochs.push_back(std::move(r));
    }
    o.ranks = gather_rank_totals(comm, loader.stats());
    o.tier = gather_tier(comm, a.stage, loader.stats());
    if (comm.rank() == 0 && !a.quiet) print_summary(a, o);
    run_agreed(comm, [&] {
        if (!a.json.empty() && comm.rank() == 0) write_stage_json(a, o);
    });
    return a.verify && !o.all_ok ? 1 : 0;
}

}  // namespace mpistage::cli
