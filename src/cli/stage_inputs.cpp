// The inputs of `mpistage stage`: files with fixed batches, files with budget batches, and
// --sqlite streams (see stage_inputs.hpp).
#include "cli/stage_inputs.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "comm/agree.hpp"
#include "mpistage/error.hpp"

namespace mpistage::cli {

namespace {

LoaderOptions loader_options(const StageArgs& a) {
    LoaderOptions o;
    o.plan.batch_size = a.batch_size;
    o.plan.seed = a.seed;
    o.plan.shuffle = parse_shuffle(a.shuffle);
    o.plan.sharding = parse_sharding(a.effective_sharding());
    o.plan.remainder = parse_remainder(a.remainder);
    o.plan.balance_steps = a.balance_steps;
    o.plan.chunk_samples = a.chunk_samples;
    o.plan.window_chunks = a.window_chunks;
    o.pipeline.prefetch = a.prefetch;
    o.pipeline.io_threads = a.threads;
    o.safety.timeout = std::chrono::seconds(a.timeout_seconds);
    o.safety.verify_files = a.verify_files;
    o.safety.fingerprint = parse_fingerprint_level(a.fingerprint);
    o.safety.accept_legacy_state = a.accept_legacy_state;
    o.delivery.device = a.device;
    o.delivery.log_device_fallback = !a.quiet;
    o.tier.stage = parse_stage(a.stage);
    o.tier.stage_budget_bytes = a.stage_budget;
    o.tier.stage_ranks_per_node =
        static_cast<int>(std::min<std::uint64_t>(a.stage_ranks_per_node, 1 << 30));
    o.tier.stage_read = parse_stage_read(a.stage_read);
    o.pipeline.two_phase = parse_two_phase(a.two_phase);
    o.plan.budget.batch_bytes = a.batch_bytes;
    o.plan.budget.batch_tokens = a.batch_tokens;
    o.plan.budget.max_batch_samples = a.max_batch_samples;
    o.plan.budget.bucket_window = a.bucket_window;
    return o;
}

// Collective: the loader of FILE input, fixed or budget batches (the token field is agreed).
Loader open_loader(const Communicator& comm, const Source& source, const StageArgs& a,
                   const std::optional<SavedState>& resume, InputKind kind) {
    LoaderOptions o = loader_options(a);
    if (a.batch_tokens > 0) {
        o.plan.budget.token_field = run_agreed_value(comm, [&] {
            return token_field_index(source.fields(), a.token_field, input_kind_name(kind));
        });
    }
    if (!resume) return Loader(comm, source, o);
    return Loader::restore(comm, source, o, resume->loader);
}

// The input part of the report every kind shares.
void describe_common(const StageArgs& a, StageOutcome& o) {
    o.batching = a.budget() ? "budget" : "fixed";
    o.paths = a.stream() ? std::vector<std::string>{a.sqlite} : a.files;
    o.batch_size = a.budget() ? a.max_batch_samples : a.batch_size;
}

nlohmann::json budget_json(const StageArgs& a) {
    return {{"batch_bytes", a.batch_bytes},
            {"batch_tokens", a.batch_tokens},
            {"max_batch_samples", a.max_batch_samples},
            {"bucket_window", a.bucket_window},
            {"waste_unit", a.batch_tokens > 0 ? "tokens" : "bytes"}};
}

std::string file_state_note(const LoaderState& s, std::uint64_t num_samples) {
    return "epoch " + std::to_string(s.epoch) + ", step " + std::to_string(s.steps_consumed) +
           ", " + std::to_string(s.samples_consumed) + " of " + std::to_string(num_samples) +
           " samples consumed";
}

}  // namespace

std::size_t token_field_index(const std::vector<FieldInfo>& fields, const std::string& name,
                              const std::string& input) {
    std::string ragged;
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].name == name && fields[f].ragged) return f;
        if (fields[f].ragged) ragged += (ragged.empty() ? "'" : ", '") + fields[f].name + "'";
    }
    std::size_t count = 0;
    std::size_t only = 0;
    for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].ragged) {
            ++count;
            only = f;
        }
    }
    if (name.empty() && count == 1) return only;
    throw ConfigError("stage: --batch-tokens counts the elements of a ragged field, and " +
                      (name.empty() ? std::string("the input has not exactly one")
                                    : "--token-field '" + name + "' is not one") +
                      " (ragged fields of the " + input +
                      " input: " + (ragged.empty() ? std::string("none") : ragged) + ")");
}

// ---- files, fixed batches --------------------------------------------------------------------

FileInput::FileInput(const Communicator& comm, const Source& source, const StageArgs& a,
                     const std::optional<SavedState>& resume, InputKind kind)
    : loader_(open_loader(comm, source, a, resume, kind)) {}

void FileInput::note_epoch(const EpochRange& r, EpochReport& rep) const {
    const EpochPlan& p = r.plan();
    rep.step_ratio_worst = p.worst_step_byte_ratio;
    rep.step_ratio_mean = p.mean_step_byte_ratio;
    rep.unbalanced_worst = p.unbalanced_worst_step_byte_ratio;
    rep.unbalanced_mean = p.unbalanced_mean_step_byte_ratio;
    if (p.budgeted()) {
        rep.padding_waste = p.budget.waste.ratio();
        rep.unbucketed_padding_waste = p.budget.unbucketed_waste.ratio();
    }
}

std::optional<SavedState> FileInput::snapshot() const {
    SavedState s;
    s.loader = loader_.state();
    return s;
}

RankTotals FileInput::totals() const {
    const LoaderStats& s = loader_.stats();
    RankTotals t;
    t.bytes = s.bytes_read;
    t.wait_seconds = s.wait_time.count();
    t.wait_io_seconds = s.wait_io_time.count();
    t.wait_peers_seconds = s.wait_peers_time.count();
    t.records_moved = s.records_moved;
    t.oversize = s.oversize_batches;
    t.device = s.device.index;
    t.h2d_bytes = s.staging.bytes_copied;
    t.h2d_seconds = s.staging.copy_seconds;
    t.read_ahead_chunks = s.read_ahead.chunks_read;
    t.read_ahead_peak_bytes = s.read_ahead.peak_resident_bytes;
    t.read_ahead_over_budget = s.read_ahead.over_budget_reads;
    t.read_ahead_readers = s.read_ahead.readers;
    t.read_ahead_wait_seconds = s.read_ahead.wait_seconds;
    return t;
}

namespace {

nlohmann::json plan_json(const PlanOptions& p) {
    nlohmann::json j = {{"seed", p.seed},
                        {"shuffle", to_string(p.shuffle)},
                        {"sharding", to_string(p.sharding)},
                        {"balance_steps", p.balance_steps}};
    if (p.shuffle == Shuffle::chunks) {
        j["chunk_samples"] = p.chunk_samples;
        j["window_chunks"] = p.window_chunks;
    }
    return j;
}

}  // namespace

void FileInput::describe(const StageArgs& a, StageOutcome& o) const {
    describe_common(a, o);
    const LoaderOptions& opt = loader_.options();
    o.options = plan_json(opt.plan);
    o.options.update({{"batch_size", opt.plan.batch_size},
                      {"remainder", to_string(opt.plan.remainder)},
                      {"prefetch", opt.pipeline.prefetch},
                      {"io_threads", opt.pipeline.io_threads},
                      {"timeout_seconds", opt.safety.timeout.count()},
                      {"verify_files", opt.safety.verify_files},
                      {"fingerprint", to_string(opt.safety.fingerprint)},
                      {"accept_legacy_state", opt.safety.accept_legacy_state},
                      {"device", opt.delivery.device},
                      {"stage", to_string(opt.tier.stage)},
                      {"stage_budget_bytes", opt.tier.stage_budget_bytes},
                      {"stage_ranks_per_node", opt.tier.stage_ranks_per_node},
                      {"stage_read", to_string(opt.tier.stage_read)},
                      {"two_phase", to_string(opt.pipeline.two_phase)}});
    if (opt.plan.budget.active()) {
        o.options.update({{"token_field", opt.plan.budget.token_field}});
        o.budget = budget_json(a);
    }
    o.num_samples = loader_.num_samples();
    o.remainder = opt.plan.budget.active() ? "mask" : a.remainder;
    o.shuffle = to_string(opt.plan.shuffle);  // stage auto may have chosen chunks
    o.sharding = a.effective_sharding();
}

// ---- streams ---------------------------------------------------------------------------------

namespace {

// --column NAME:TYPE[:convert] (the name may itself hold ':'; the type is the last or, with
// :convert, the second-to-last part).
SqliteColumn sqlite_column(const std::string& spec) {
    std::string rest = spec;
    SqliteColumn c;
    const std::string convert = ":convert";
    if (rest.size() > convert.size() &&
        rest.compare(rest.size() - convert.size(), convert.size(), convert) == 0) {
        c.convert = true;
        rest.resize(rest.size() - convert.size());
    }
    const auto colon = rest.rfind(':');
    const std::string type = colon == std::string::npos ? "" : rest.substr(colon + 1);
    c.name = colon == std::string::npos ? "" : rest.substr(0, colon);
    if (type == "int64") {
        c.type = SqliteType::int64;
    } else if (type == "float64") {
        c.type = SqliteType::float64;
    } else if (type == "text") {
        c.type = SqliteType::text;
    } else if (type == "blob") {
        c.type = SqliteType::blob;
    } else {
        throw ConfigError(
            "stage: --column must be NAME:TYPE[:convert] with TYPE int64, float64, "
            "text or blob, not '" +
            spec + "'");
    }
    if (c.name.empty()) throw ConfigError("stage: --column '" + spec + "' names no column");
    return c;
}

double parse_fill(const std::string& text) {
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != text.size() || !std::isfinite(v)) {
        throw ConfigError("stage: --nulls fill:VALUE needs a finite number, not '" + text + "'");
    }
    return v;
}

LoaderOptions stream_options(const StageArgs& a, SqliteOptions& sqlite) {
    LoaderOptions lo;
    StreamPlanOptions& o = lo.stream;
    sqlite.path = a.sqlite;
    sqlite.query = a.query;
    if (a.shard == "chunk") {
        o.sharding = StreamSharding::chunk;
    } else if (a.shard.rfind("hash:", 0) == 0 && a.shard.size() > 5) {
        o.sharding = StreamSharding::hash;
        sqlite.key_column = a.shard.substr(5);
    } else if (a.shard.rfind("range:", 0) == 0 && a.shard.size() > 6) {
        // Key ranges pushed into the SQL, whole ranges to ranks by their key span.
        o.sharding = StreamSharding::source;
        sqlite.range_column = a.shard.substr(6);
    } else {
        throw ConfigError("stage: --shard must be chunk, hash:COLUMN or range:COLUMN, not '" +
                          a.shard + "'");
    }
    if (a.on_dry != "rebalance" && a.on_dry != "mask") {
        throw ConfigError("stage: --on-dry must be rebalance or mask, not '" + a.on_dry + "'");
    }
    o.remainder = a.on_dry == "mask" ? StreamRemainder::mask : StreamRemainder::rebalance;
    // Rows read ahead by I/O threads while the trainer computes, as for FILE input.
    if (a.prefetch == 0 || a.prefetch > kMaxPrefetch) {
        throw ConfigError("stage: --prefetch must be in [1, " + std::to_string(kMaxPrefetch) +
                          "], not " + std::to_string(a.prefetch));
    }
    if (a.threads > kMaxIoThreads) {
        throw ConfigError("stage: --threads must be at most " + std::to_string(kMaxIoThreads) +
                          ", not " + std::to_string(a.threads));
    }
    lo.pipeline.prefetch = a.prefetch;
    // Read ahead only when asked: cheap rows cost more to hand over than to read in the loop.
    lo.pipeline.io_threads = a.threads_given ? a.threads : 0;
    // Batches on the device, as for FILE input: the loader's delivery copies each one there.
    lo.delivery.device = a.device;
    lo.delivery.log_device_fallback = !a.quiet;
    for (const std::string& spec : a.columns) sqlite.columns.push_back(sqlite_column(spec));
    if (a.nulls == "error") {
        sqlite.nulls = SqliteNulls::error;
    } else if (a.nulls == "mask") {
        sqlite.nulls = SqliteNulls::mask;
    } else if (a.nulls.rfind("fill:", 0) == 0 && a.nulls.size() > 5) {
        sqlite.nulls = SqliteNulls::fill;
        sqlite.fill_value = parse_fill(a.nulls.substr(5));
    } else {
        throw ConfigError("stage: --nulls must be error, mask or fill:VALUE, not '" + a.nulls +
                          "'");
    }
    sqlite.validate();
    o.chunk_size = a.chunk_rows;
    if (o.chunk_size == 0) throw ConfigError("stage: --chunk-rows must be at least 1, not 0");
    lo.plan.budget.batch_bytes = a.batch_bytes;
    lo.plan.budget.batch_tokens = a.batch_tokens;
    lo.plan.budget.max_batch_samples = a.max_batch_samples;
    if (!a.budget()) lo.plan.batch_size = a.batch_size;
    if ((a.budget() ? a.max_batch_samples : a.batch_size) == 0) {
        throw ConfigError(std::string("stage: ") +
                          (a.budget() ? "--max-batch-samples" : "--batch-size") +
                          " must be at least 1, not 0");
    }
    lo.safety.timeout = std::chrono::seconds(a.timeout_seconds);
    return lo;
}

}  // namespace

StreamInput::StreamInput(const Communicator& comm, const StageArgs& a,
                         const std::optional<SavedState>& resume) {
    SqliteOptions sqlite;
    LoaderOptions options = run_agreed_value(comm, [&] { return stream_options(a, sqlite); });
    source_ = std::make_unique<SqliteSource>(comm, sqlite);
    if (a.batch_tokens > 0) {
        run_agreed(comm, [&] {
            options.plan.budget.token_field =
                token_field_index(source_->fields(), a.token_field, "sqlite");
        });
    }
    loader_ = resume ? std::make_unique<Loader>(
                           Loader::restore(comm, *source_, std::move(options), resume->loader))
                     : std::make_unique<Loader>(comm, *source_, std::move(options));
    // Counted in the source's snapshot (the one every rank reads): the query on rank 0, or
    // with --shard range the key ranges split over the ranks as the loader splits them
    // (stream s on rank s mod W, since every range weighs 1), so that no rank steps through
    // rows it does not read.
    const std::size_t streams = source_->num_streams();
    const auto w = static_cast<std::size_t>(comm.size());
    const std::uint64_t rows = run_agreed_value(comm, [&] {
        std::uint64_t n = 0;
        for (auto s = static_cast<std::size_t>(comm.rank()); s < streams; s += w) {
            n += source_->count_rows(s);
        }
        return n;
    });
    rows_ = comm.allreduce_sum(rows);
}

void StreamInput::collect(const HostBatch& b, std::vector<std::uint64_t>& hashes) const {
    for (std::size_t j = 0; j < b.size(); ++j) {
        if (b.valid()[j]) hashes.push_back(sample_content_hash(b, j));
    }
}

const std::vector<std::uint64_t>& StreamInput::reference(const Communicator& comm) {
    if (!have_reference_) {
        run_agreed(comm, [&] {
            if (comm.rank() != 0) return;
            StreamSample sample;
            for (std::size_t s = 0; s < source_->num_streams(); ++s) {
                std::unique_ptr<StreamReader> reader = source_->open(s);
                while (reader->next(sample)) reference_.push_back(sample_content_hash(sample));
            }
            std::sort(reference_.begin(), reference_.end());
        });
        have_reference_ = true;
    }
    return reference_;
}

std::optional<SavedState> StreamInput::snapshot() const {
    SavedState s;
    s.loader = loader_->state();
    return s;
}

RankTotals StreamInput::totals() const {
    const LoaderStats& s = loader_->stats();
    RankTotals t;
    t.bytes = s.bytes_read;
    t.records_moved = s.stream.items_sent;
    t.oversize = s.oversize_batches;
    t.wait_peers_seconds = s.wait_peers_time.count();
    // Waiting for rows the I/O threads had not read yet (0 when read on this thread).
    t.wait_io_seconds = s.wait_io_time.count();
    t.wait_seconds = t.wait_io_seconds + t.wait_peers_seconds;
    t.device = s.device.index;
    t.h2d_bytes = s.staging.bytes_copied;
    t.h2d_seconds = s.staging.copy_seconds;
    return t;
}

void StreamInput::describe(const StageArgs& a, StageOutcome& o) const {
    describe_common(a, o);
    o.num_samples = rows_;
    const LoaderOptions& lo = loader_->options();
    const StreamPlanOptions& opt = lo.stream;
    const bool budget = lo.plan.budget.active();
    o.options = {{"batch_size", budget ? lo.plan.budget.max_batch_samples : lo.plan.batch_size},
                 {"batch_bytes", lo.plan.budget.batch_bytes},
                 {"batch_tokens", lo.plan.budget.batch_tokens},
                 {"token_field", lo.plan.budget.token_field},
                 {"chunk_size", opt.chunk_size},
                 {"sharding", opt.sharding == StreamSharding::hash     ? "hash"
                              : opt.sharding == StreamSharding::source ? "range"
                                                                       : "chunk"},
                 {"remainder", opt.remainder == StreamRemainder::mask ? "mask" : "rebalance"},
                 {"timeout_seconds", lo.safety.timeout.count()},
                 {"prefetch", lo.pipeline.prefetch},
                 {"io_threads", lo.pipeline.io_threads},
                 {"device", lo.delivery.device}};
    o.remainder = a.on_dry;
    o.shuffle = "none";
    o.sharding = a.shard;
    o.fields = source_->fields();
    if (a.budget()) o.budget = budget_json(a);
    o.stream = {{"sqlite", a.sqlite},
                {"query", a.query},
                {"shard", a.shard},
                {"chunk_rows", opt.chunk_size},
                {"on_dry", a.on_dry}};
}

std::vector<std::int64_t> StreamInput::consumed_ids(const LoaderState& state) {
    std::vector<std::int64_t> ids;
    for (std::size_t s = 0; s < state.streams.size(); ++s) {
        const StreamPosition& p = state.streams[s];
        std::size_t k = 0;
        for (std::uint64_t pos = 0; pos < p.next; ++pos) {
            while (k < p.pending.size() && p.pending[k].second <= pos) ++k;
            const bool pending = k < p.pending.size() && p.pending[k].first <= pos;
            if (!pending) ids.push_back(stream_item_id(s, pos));
        }
    }
    return ids;
}

std::string state_note(const SavedState& s, std::uint64_t num_samples) {
    if (s.stream()) {
        return "epoch " + std::to_string(s.loader.epoch) + ", step " +
               std::to_string(s.loader.steps_consumed) + ", " +
               std::to_string(s.loader.samples_consumed) + " of " + std::to_string(num_samples) +
               " rows delivered";
    }
    return file_state_note(s.loader, num_samples);
}

}  // namespace mpistage::cli
