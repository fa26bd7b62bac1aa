// `mpistage stage --sqlite DB --query SQL`: stage a database query as a stream (chunk or key
// sharding, equal steps), optionally stop after K steps and save the state, or resume from it;
// --verify checks every row exactly once against an independent COUNT(*).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/args.hpp"
#include "cli/stream_args.hpp"
#include "cli/stream_verify.hpp"
#include "comm/agree.hpp"
#include "mpistage/sqlite_source.hpp"
#include "mpistage/stream.hpp"

namespace mpistage::cli {

namespace {

using ull = unsigned long long;

struct StreamPlan {
    StreamOptions options;
    SqliteOptions sqlite;
    std::uint64_t stop_after = 0;
    std::string save_state;
    std::string resume;
};

// Local: the options from the flags. @throws ConfigError naming the flag.
StreamPlan plan_of(const StreamStageArgs& s, const StageArgs& a) {
    StreamPlan p;
    p.sqlite.path = s.sqlite;
    p.sqlite.query = s.query;
    if (s.shard == "chunk") {
        p.options.sharding = StreamSharding::chunk;
    } else if (s.shard.rfind("hash:", 0) == 0 && s.shard.size() > 5) {
        p.options.sharding = StreamSharding::hash;
        p.sqlite.key_column = s.shard.substr(5);
    } else {
        throw ConfigError("stage: --shard must be chunk or hash:COLUMN, not '" + s.shard + "'");
    }
    if (s.on_dry != "rebalance" && s.on_dry != "mask") {
        throw ConfigError("stage: --on-dry must be rebalance or mask, not '" + s.on_dry + "'");
    }
    p.options.remainder = s.on_dry == "mask" ? StreamRemainder::mask : StreamRemainder::rebalance;
    p.options.chunk_size = s.chunk_rows;
    p.options.batch_bytes = s.batch_bytes;
    p.options.batch_size =
        s.batch_bytes > 0 && s.max_batch_samples > 0 ? s.max_batch_samples : a.batch_size;
    p.options.timeout = std::chrono::seconds(a.timeout_seconds);
    p.options.validate();
    const std::string stop = s.flag("--stop-after-steps");
    try {
        p.stop_after = stop.empty() ? 0 : std::stoull(stop);
    } catch (const std::exception&) {
        throw ConfigError("stage: --stop-after-steps must be a count, not '" + stop + "'");
    }
    p.save_state = s.flag("--save-state");
    p.resume = s.flag("--resume");
    return p;
}

std::vector<NamedValue> stream_argument_values(const StreamStageArgs& s, const StageArgs& a) {
    return {{"--sqlite", s.sqlite},
            {"--query", s.query},
            {"--shard", s.shard},
            {"--chunk-rows", std::to_string(s.chunk_rows)},
            {"--batch-bytes", std::to_string(s.batch_bytes)},
            {"--max-batch-samples", std::to_string(s.max_batch_samples)},
            {"--batch-size", std::to_string(a.batch_size)},
            {"--on-dry", s.on_dry},
            {"--verify", a.verify ? "on" : "off"},
            {"--timeout", std::to_string(a.timeout_seconds)},
            {"--ids-out", s.ids_out.empty() ? "(none)" : "(given)"},
            {"--stop-after-steps", s.flag("--stop-after-steps")},
            {"--save-state", s.flag("--save-state").empty() ? "(none)" : "(given)"},
            {"--resume", s.flag("--resume")}};
}

// Collective: rank 0 reads the state file and broadcasts it (ranks need not see the file).
StreamState read_state(const Communicator& comm, const std::string& path) {
    std::string text;
    run_agreed(comm, [&] {
        if (comm.rank() != 0) return;
        std::ifstream in(path);
        if (!in) throw IoError("stage: cannot read --resume file '" + path + "'");
        std::ostringstream os;
        os << in.rdbuf();
        text = os.str();
        StreamState::from_json(text);  // a broken file fails here, on every rank (agreed)
    });
    return StreamState::from_json(comm.broadcast(text, 0));
}

// Local (rank 0): writes `text` to `path` atomically (temporary file, then rename).
void write_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << text << "\n";
        if (!out) throw IoError("stage: cannot write '" + tmp + "'");
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        throw IoError("stage: cannot rename '" + tmp + "' to '" + path + "'");
    }
}

}  // namespace

int run_stream_stage(Communicator& comm, const StreamStageArgs& s, const StageArgs& a) {
    const StreamPlan p = run_agreed_value(comm, [&] { return plan_of(s, a); });
    require_same(comm, stream_argument_values(s, a), "stage: ranks were given different arguments",
                 kSameCommandAdvice);
    comm.set_timeout(p.options.timeout);
    StreamState resumed;
    if (!p.resume.empty()) resumed = read_state(comm, p.resume);
    SqliteSource source(comm, p.sqlite);
    StreamLoader loader(comm, source, p.options, p.resume.empty() ? nullptr : &resumed);
    const std::uint64_t rows = run_agreed_value(comm, [&] { return source.count_rows(); });
    if (comm.rank() == 0 && !a.quiet) {
        std::printf(
            "stage --sqlite %s: %llu rows, %d ranks, shard %s, %s\n", s.sqlite.c_str(),
            static_cast<ull>(rows), comm.size(), s.shard.c_str(),
            p.options.batch_bytes
                ? ("batch budget " + std::to_string(p.options.batch_bytes) + " bytes").c_str()
                : ("batch size " + std::to_string(p.options.batch_size)).c_str());
    }
    StreamRun run;
    HostBatch b;
    while ((p.stop_after == 0 || run.steps < p.stop_after) && loader.next(b)) {
        ++run.steps;
        for (std::size_t j = 0; j < b.size(); ++j) {
            if (b.valid()[j]) run.ids.push_back(b.index()[j]);
        }
    }
    run.finished = p.stop_after == 0 || run.steps < p.stop_after;
    if (!p.save_state.empty()) {
        const std::string text = loader.state().to_json();
        run_agreed(comm, [&] {
            if (comm.rank() == 0) write_atomically(p.save_state, text);
        });
    }
    const StreamReport r = report_stream_run(comm, loader, run, rows,
                                             p.resume.empty() ? nullptr : &resumed, s.ids_out);
    if (comm.rank() == 0 && !a.quiet) print_stream_report(r, a.verify);
    return a.verify && !r.ok ? 1 : 0;
}

}  // namespace mpistage::cli
