// The stream half of the Loader: construction, passes, and the collective step (agree, read
// more, rebalance, batch).
#include "loader/stream/stream_engine.hpp"

#include <algorithm>
#include <sstream>

#include "comm/agree.hpp"
#include "loader/device_delivery.hpp"
#include "mpistage/hash.hpp"

namespace mpistage {

namespace {

std::string fields_text(const std::vector<FieldInfo>& fields) {
    std::string t;
    for (const auto& f : fields) {
        t += f.name + ":" + dtype_name(f.dtype) + (f.ragged ? ":ragged" : "") + ":";
        for (auto d : f.sample_shape) t += std::to_string(d) + "x";
        t += ";";
    }
    return t;
}

/// Where the setting `key` of `StreamConfig::describe` comes from in LoaderOptions.
std::string option_path(const std::string& key) {
    if (key == "batch_size") return "plan.batch_size";
    if (key == "batch_bytes" || key == "batch_tokens" || key == "token_field") {
        return "plan.budget." + key;
    }
    if (key == "timeout") return "safety.timeout";
    return "stream." + key;
}

/// The fields of `StreamConfig::describe` ("batch_bytes=0 ...") as named values, so that an
/// option that differs between ranks is named on its own with both values.
std::vector<NamedValue> option_values(const detail::StreamConfig& o) {
    std::vector<NamedValue> out;
    std::istringstream words(o.describe());
    for (std::string w; words >> w;) {
        const auto eq = w.find('=');
        // Read-ahead changes no batch (stream_prefetch.hpp): ranks may differ in it.
        const std::string key = w.substr(0, eq);
        if (key == "prefetch" || key == "io_threads") continue;
        out.push_back({"LoaderOptions::" + option_path(key),
                       eq == std::string::npos ? "" : w.substr(eq + 1)});
    }
    return out;
}

}  // namespace

std::string detail::StreamEngine::state_fingerprint() const {
    // Batching and the timeout do not decide who reads or owns what, so a state may be resumed
    // with other batch sizes or budgets.
    // `keys` reading yields the same items at the same positions with the same owners as
    // `chunks` (only who reads differs), so a state of one resumes with the other: both are
    // written as `chunks` (0), as states were before `keys` existed.
    const HashReading reading =
        options.hash_reading == HashReading::keys ? HashReading::chunks : options.hash_reading;
    const std::string own = std::to_string(static_cast<int>(options.sharding)) + "/" +
                            std::to_string(options.chunk_size) + "/" +
                            std::to_string(static_cast<int>(reading));
    return std::to_string(fnv1a64(source.fingerprint() + "|" + fields_text(source.fields()) + "|" +
                                  std::to_string(source.num_streams()) + "|" + own));
}

void detail::StreamEngine::check_agreement(const LoaderState* resume) {
    run_agreed(comm, [&] {
        options = detail::stream_config(loader_options);
        if (options.hash_reading == HashReading::automatic) {
            options.hash_reading = source.keys_first() ? HashReading::keys : HashReading::chunks;
        }
        const auto& f = source.fields();
        if (f.empty()) throw ConfigError("stream: the source declares no fields");
        if (options.batch_tokens > 0 &&
            (options.token_field >= f.size() || !f[options.token_field].ragged)) {
            throw ConfigError("stream: token_field must name a ragged field");
        }
        if (source.num_streams() >= (std::uint64_t{1} << 23)) {
            throw ConfigError("stream: at most 2^23 sub-streams (item ids are stream << 40)");
        }
        const std::string unstable = source.unstable_order();
        if (!unstable.empty() && detail::walks_every_stream(options)) {
            throw ConfigError("stream: " + unstable +
                              ", so every rank would see its rows in another order and reading "
                              "by position would yield some twice and others never; order it "
                              "by a key, or read each stream on one rank (sharding source, or "
                              "hash with hash_reading sources)");
        }
        if (!unstable.empty() && resume) {
            throw ConfigError("stream: " + unstable +
                              ", so a saved state's positions do not name the same rows again; "
                              "it cannot be resumed");
        }
        if (resume) {
            if (resume->input != LoaderInput::stream) {
                throw ConfigError(
                    "stream: the saved state is of a loader over files, not of a stream");
            }
            if (resume->dataset_fingerprint != state_fingerprint()) {
                throw ConfigError(
                    "stream: the saved state belongs to another source or sharding (state "
                    "fingerprint " +
                    resume->dataset_fingerprint + ", this loader " + state_fingerprint() + ")");
            }
            if (resume->streams.size() != source.num_streams()) {
                throw ConfigError("stream: the saved state has " +
                                  std::to_string(resume->streams.size()) + " streams, the source " +
                                  std::to_string(source.num_streams()));
            }
        }
    });
    std::vector<NamedValue> same = option_values(options);
    same.insert(same.end(), {{"fields", fields_text(source.fields())},
                             {"number of streams", std::to_string(source.num_streams())},
                             {"source fingerprint", source.fingerprint()},
                             {"resumed state", resume ? resume->to_json() : "(none)"}});
    require_same(comm, same, "stream loader: ranks disagree",
                 "every rank must build the same source and options");
}

detail::StreamEngine::StreamEngine(const CommRef& c, const StreamSource& s, LoaderOptions o,
                                   const LoaderState* resume)
    : comm(c.duplicate()), source(s), loader_options(std::move(o)) {
    comm.set_timeout(loader_options.safety.timeout.count() >= 0 ? loader_options.safety.timeout
                                                                : std::chrono::seconds(0));
    resumed.input = LoaderInput::stream;
    stats.tier = "stream";
    check_agreement(resume);
    // The device kind is agreed as for files (all CUDA, or all CPU with one line for the job).
    comm.set_context({"stream loader: device", -1, -1, "", -1});
    device = detail::agree_device(comm, loader_options);
    stats.device = device.device;
    run_agreed(comm, [&] {
        if (device.device.cuda)
            stager = detail::make_loader_stager(device.device, loader_options, 2);
    });
    if (resume) {
        resumed = *resume;
        resume_pending = true;
        epoch = resume->epoch;
        steps = resume->steps_consumed;
        delivered_before = resume->samples_consumed;
    }
    reset_yielded();
    run_agreed(comm, [&] { open_cursors(); });
    start_prefetch();
}

void detail::StreamEngine::begin_pass(std::uint64_t e) {
    if (failure) throw_error(failure->kind, failure->message);
    // The pass the loader was made for (fresh: pass e from the start; resumed: the rest of
    // the state's pass when e is its epoch) is open already; any other call starts over.
    const bool continues = !pass_begun && (!resume_pending || e == resumed.epoch);
    if (!continues) restart_pass();
    resume_pending = false;
    pass_begun = true;
    epoch = e;
    stopped = false;
    range_first_step = steps;
}

void detail::StreamEngine::restart_pass() {
    // Every stream from its first sample; the counters of a pass start again.
    prefetch.reset();  // its threads read the cursors: stopped first
    cursors.clear();
    next_cursor = 0;
    queue.clear();
    window_left = 0;
    read_failure.reset();
    resumed = LoaderState{};
    resumed.input = LoaderInput::stream;
    announced.clear();
    steps = 0;
    delivered_before = 0;
    reset_yielded();
    finished = false;
    last_oversize = false;
    run_agreed(comm, [&] { open_cursors(); });
    start_prefetch();
}

bool detail::StreamEngine::next(HostBatch& out, bool stop) {
    if (failure) throw_error(failure->kind, failure->message);
    if (finished || stopped) return false;
    try {
        if (!step(out, stop)) return false;
        if (stager) deliver(out);
        return true;
    } catch (...) {
        failure = LocalStatus::from_current_exception();
        throw;
    }
}

void detail::StreamEngine::deliver(HostBatch& out) {
    release_deferred();  // what the copy stream's host functions handed back
    try {
        refuse_capture(*stager);  // before any CUDA call (a graph capture on the consumer's stream)
        HostBatch shape = submit_batch(*stager, std::move(out), false);
        out = take_batch(*stager, std::move(shape));
        stats.staging = stager->stats();
        return;
    } catch (const Error&) {
        device_failure = LocalStatus::from_current_exception();
    }
    out = HostBatch();
    // The others yield the window's remaining steps without a collective: so does this rank
    // (their batches dropped), then the agreement where they arrive carries the failure.
    while (window_left > 0) {
        --window_left;
        record_step();
        (void)make_batch(detail::choose_batch(queue_costs(), options));
    }
    HostBatch unused;
    (void)step(unused, false);  // throws the agreed error on every rank
    throw_error(device_failure->kind, device_failure->message);  // not reached
}

bool detail::StreamEngine::step(HostBatch& out, bool stop) {
    if (window_left > 0) {
        // Agreed by the window: every rank holds a full batch for this step.
        --window_left;
        record_step();
        out = make_batch(detail::choose_batch(queue_costs(), options));
        return true;
    }
    comm.set_context(
        {"stream loader: agree on step", -1, static_cast<std::int64_t>(steps), "", -1});
    const std::size_t w = static_cast<std::size_t>(comm.size());
    // Windows of steps (see StreamConfig::window_steps); with hash, a window's rows are read
    // ahead and routed to their owners in one exchange, then the ranks agree once.
    const bool windowed = options.window_steps > 1;
    std::uint64_t extra = 0;
    std::uint64_t read_before = 0;
    std::vector<detail::RankStep> ranks;
    const auto wait_before = comm.collective_wait();
    for (;;) {
        std::vector<std::string> outgoing(w);
        const LocalStatus status =
            device_failure ? *device_failure
                           : capture([&] { fill(extra, outgoing, windowed && extra == 0); });
        if (detail::forwards_items(options)) {
            for (const auto& msg : comm.alltoallv(outgoing)) detail::decode_items(msg, queue);
        }
        const std::vector<detail::SampleCost> costs =
            queue_costs(windowed ? options.window_steps : 1);
        const detail::BatchChoice mine = detail::choose_batch(costs, options);
        detail::RankStep me{status.failed, queue.size(),     exhausted(), mine.take.size(),
                            mine.full,     mine.budget_left, 0,           stats.stream.items_read};
        me.stop = stop && extra == 0;
        for (const auto& it : queue)
            me.cost_sum += options.batch_tokens ? it.tokens : it.size_bytes;
        if (windowed && extra == 0 && !status.failed && mine.full) {
            me.ready = detail::full_batches(costs, options, options.window_steps);
        }
        ranks = detail::RankStep::unpack(comm.allgather(me.pack()), comm.size());
        ++stats.stream.agreements;
        const bool any_failed =
            std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.failed; });
        if (any_failed) agree_or_throw(comm, status);  // throws on every rank
        if (std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.stop; })) {
            // An agreed stop: this step is not yielded on any rank (the state stands here).
            stopped = true;
            stats.wait_peers_time += comm.collective_wait() - wait_before;
            return false;
        }
        std::uint64_t queued = 0, surplus = 0, open = 0, read = 0;
        for (const auto& r : ranks) {
            read += r.read;
            queued += r.queued;
            surplus += r.full ? r.queued - r.take : 0;
            open += r.exhausted ? 0 : 1;
        }
        if (queued == 0 && open == 0) {
            finished = true;
            stats.wait_peers_time += comm.collective_wait() - wait_before;
            return false;
        }
        std::uint64_t ready = options.window_steps;
        for (const auto& r : ranks) ready = std::min(ready, r.ready);
        if (ready > 0) {
            // Every rank holds `ready` full batches: this step and the next ready − 1 need
            // no agreement (nobody is short, so nothing moves and nobody stops).
            window_left = ready - 1;
            break;
        }
        const auto d = detail::deficits(ranks, options);
        std::uint64_t deficit = 0;
        for (auto x : d) deficit += x;
        const bool moves = options.remainder == StreamRemainder::rebalance;
        const std::uint64_t uncovered =
            moves ? (deficit > surplus ? deficit - surplus : 0) : deficit;
        const bool route = detail::forwards_items(options);
        // A round in which no rank read anything cannot be followed by a better one.
        const bool stalled = extra > 0 && read == read_before;
        read_before = read;
        if (uncovered == 0 || open == 0 || (!moves && !route) || stalled) break;
        // Open ranks read their share of what is still missing: hash routing counts items
        // read; otherwise `fill` counts items queued beyond the own batch (the surplus).
        const std::uint64_t share = (uncovered + open - 1) / open;
        extra = share + (route || !me.full ? 0 : me.queued - me.take);
        ++stats.stream.extra_rounds;
    }
    if (options.remainder == StreamRemainder::rebalance) rebalance(ranks);
    // What every rank yields at the agreed steps (the window's, or this one), so that every
    // rank knows the state at every step (`state()` is local).
    announce(window_left + 1);
    stats.wait_peers_time += comm.collective_wait() - wait_before;
    record_step();
    out = make_batch(detail::choose_batch(queue_costs(), options));
    return true;
}

void detail::StreamEngine::rebalance(const std::vector<detail::RankStep>& ranks) {
    const auto d = detail::deficits(ranks, options);
    std::vector<std::uint64_t> s(ranks.size(), 0);
    bool any_need = false, any_have = false;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        s[r] = ranks[r].full ? ranks[r].queued - ranks[r].take : 0;
        any_need = any_need || d[r] > 0;
        any_have = any_have || s[r] > 0;
    }
    if (!any_need || !any_have) return;  // the same decision on every rank
    const auto plan = detail::transfer_plan(d, s);
    const auto me = static_cast<std::size_t>(comm.rank());
    // Send the oldest samples beyond this rank's own batch that this rank read itself, in queue
    // order, so that a stream's samples reach each rank in the order they were read: what stays
    // is newer than what was sent, what a later step sends is newer still, and a sample moves
    // at most once (one received earlier is yielded here; with a budget a rank may so send
    // fewer than planned, and the receiver's batch is smaller).
    const detail::BatchChoice own = detail::choose_batch(queue_costs(), options);
    std::vector<bool> keep(queue.size(), false);
    for (auto i : own.take) keep[i] = true;
    std::vector<std::string> outgoing(ranks.size());
    std::deque<detail::StreamItem> stay;
    std::size_t to = 0;
    std::uint64_t sent_to = 0;
    for (std::size_t i = 0; i < queue.size(); ++i) {
        while (to < ranks.size() && sent_to >= plan[me][to]) {
            ++to;
            sent_to = 0;
        }
        if (keep[i] || queue[i].rebalanced || to == ranks.size()) {
            stay.push_back(std::move(queue[i]));
            continue;
        }
        detail::encode_item(queue[i], outgoing[to]);
        ++sent_to;
        ++stats.stream.items_sent;
    }
    queue = std::move(stay);
    const std::size_t kept = queue.size();
    for (const auto& msg : comm.alltoallv(outgoing)) detail::decode_items(msg, queue);
    for (std::size_t i = kept; i < queue.size(); ++i) queue[i].rebalanced = true;
}

}  // namespace mpistage
