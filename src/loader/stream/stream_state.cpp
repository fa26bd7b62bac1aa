// Stream state for resume: per-stream positions with the pending (not yet yielded) ranges,
// assembled collectively so every rank holds the same state, and its JSON form.
#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "loader/stream/stream_impl.hpp"
#include "util/json_fields.hpp"

namespace mpistage {

namespace {

using Ranges = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

void add_position(Ranges& r, std::uint64_t p) {
    if (!r.empty() && r.back().second == p) {
        ++r.back().second;
    } else {
        r.emplace_back(p, p + 1);
    }
}

Ranges merged(Ranges r) {
    std::sort(r.begin(), r.end());
    Ranges out;
    for (const auto& x : r) {
        if (!out.empty() && x.first <= out.back().second) {
            out.back().second = std::max(out.back().second, x.second);
        } else {
            out.push_back(x);
        }
    }
    return out;
}

void put(std::string& out, std::uint64_t v) {
    char b[8];
    std::memcpy(b, &v, 8);
    out.append(b, 8);
}
std::uint64_t get(const std::string& in, std::size_t& at) {
    std::uint64_t v = 0;
    std::memcpy(&v, in.data() + at, 8);
    at += 8;
    return v;
}

}  // namespace

StreamState StreamLoader::state() const {
    const Impl& m = *impl_;
    const std::size_t n = m.source.num_streams();
    // 1. How far each stream was read: the furthest position of any rank.
    std::vector<std::uint64_t> read(n, 0);
    for (const auto& c : m.cursors) read[c.stream] = c.position;
    for (std::size_t s = 0; s < n; ++s)
        read[s] = std::max(read[s], m.resumed.streams.empty() ? 0 : m.resumed.streams[s].next);
    const auto all = m.comm.allgather(read);
    std::vector<std::uint64_t> next(n, 0);
    for (std::size_t r = 0; r < static_cast<std::size_t>(m.comm.size()); ++r) {
        for (std::size_t s = 0; s < n; ++s) next[s] = std::max(next[s], all[r * n + s]);
    }
    // 2. What is not yet yielded below it: queued items, and this rank's unread positions.
    std::vector<Ranges> mine(n);
    std::vector<std::uint64_t> queued;
    for (const auto& it : m.queue) queued.push_back(it.stream << 40 | it.position);
    std::sort(queued.begin(), queued.end());
    for (auto id : queued) add_position(mine[id >> 40], id & ((std::uint64_t{1} << 40) - 1));
    for (const auto& c : m.cursors) {
        for (std::uint64_t p = c.filter.next_wanted(c.position); p < next[c.stream];
             p = c.filter.next_wanted(p + 1)) {
            add_position(mine[c.stream], p);
        }
    }
    std::string msg;
    for (std::size_t s = 0; s < n; ++s) {
        put(msg, mine[s].size());
        for (const auto& r : mine[s]) {
            put(msg, r.first);
            put(msg, r.second);
        }
    }
    put(msg, m.delivered_here);
    const auto got = m.comm.alltoallv(std::vector<std::string>(m.comm.size(), msg));
    StreamState st;
    st.fingerprint = m.state_fingerprint();
    st.steps = m.steps;
    st.delivered = m.delivered_before;
    std::vector<Ranges> pending(n);
    for (const auto& g : got) {
        std::size_t at = 0;
        for (std::size_t s = 0; s < n; ++s) {
            const std::uint64_t k = get(g, at);
            for (std::uint64_t i = 0; i < k; ++i) {
                const std::uint64_t b = get(g, at);
                pending[s].emplace_back(b, get(g, at));
            }
        }
        st.delivered += get(g, at);
    }
    for (std::size_t s = 0; s < n; ++s) st.streams.push_back({next[s], merged(pending[s])});
    return st;
}

std::string StreamState::to_json() const {
    nlohmann::json j;
    j["format"] = "mpistage-stream-state";
    j["version"] = version;
    j["fingerprint"] = fingerprint;
    j["steps"] = steps;
    j["delivered"] = delivered;
    j["streams"] = nlohmann::json::array();
    for (const auto& s : streams) {
        nlohmann::json pend = nlohmann::json::array();
        for (const auto& r : s.pending) pend.push_back({r.first, r.second});
        j["streams"].push_back({{"next", s.next}, {"pending", pend}});
    }
    return j.dump();
}

StreamState StreamState::from_json(const std::string& text) {
    const std::string where = "stream state";
    StreamState st;
    try {
        const auto j = nlohmann::json::parse(text);
        if (detail::json_string(j, "format", where) != "mpistage-stream-state") {
            throw FormatError("stream state: not an mpistage stream state");
        }
        st.version = detail::json_int(j, "version", where, 0, std::numeric_limits<int>::max());
        if (st.version != kVersion) {
            throw FormatError("stream state: version " + std::to_string(st.version) +
                              " is not supported (expected " + std::to_string(kVersion) + ")");
        }
        st.fingerprint = detail::json_string(j, "fingerprint", where);
        st.steps = detail::json_unsigned(j, "steps", where);
        st.delivered = detail::json_unsigned(j, "delivered", where);
        // Negative, fractional or out-of-range positions are refused, never wrapped: a
        // wrapped `next` would make --verify walk up to 2^64 positions.
        for (const auto& s : detail::json_array(j, "streams", where)) {
            StreamPosition p;
            p.next = detail::json_unsigned(s, "next", where);
            for (const auto& r : detail::json_array(s, "pending", where)) {
                if (!r.is_array() || r.size() != 2) {
                    detail::json_bad_value("pending", r, where, "[first, end] pairs");
                }
                p.pending.emplace_back(detail::json_unsigned_value(r[0], "pending", where),
                                       detail::json_unsigned_value(r[1], "pending", where));
            }
            st.streams.push_back(std::move(p));
        }
    } catch (const nlohmann::json::exception& e) {
        throw FormatError(std::string("stream state: ") + e.what());
    }
    return st;
}

}  // namespace mpistage
