// Tags of the loader's collectives and the message when ranks are in different loader calls.
#include "loader/sync.hpp"

#include <cstring>
#include <map>

#include "mpistage/hash.hpp"

namespace mpistage::detail {

std::vector<std::uint64_t> SyncTag::words() const {
    return {static_cast<std::uint64_t>(kind), epoch, step, steps, left_epoch, left_step,
            left_steps};
}

SyncTag SyncTag::from_words(const std::uint64_t* w) {
    SyncTag t;
    t.kind = static_cast<SyncKind>(w[0]);
    t.epoch = w[1];
    t.step = w[2];
    t.steps = w[3];
    t.left_epoch = w[4];
    t.left_step = w[5];
    t.left_steps = w[6];
    return t;
}

std::uint64_t SyncTag::hash() const {
    std::uint64_t h = 0x6d707374616765ULL;  // "mpstage"
    for (const std::uint64_t w : words()) h = mix64(h ^ w);
    return h;
}

namespace {

std::string left_part(const SyncTag& t) {
    if (t.left_epoch == kNoEpochLeft) return " (no epoch started before)";
    if (t.left_epoch == kDivergedEpoch) return " (after ranks were found in different calls)";
    const std::string e = std::to_string(t.left_epoch);
    if (t.left_step >= t.left_steps) {
        return " after finishing epoch " + e + " (" + std::to_string(t.left_steps) + " steps)";
    }
    return " after leaving epoch " + e + " at step " + std::to_string(t.left_step) + " of " +
           std::to_string(t.left_steps);
}

std::string ranks_text(const std::vector<int>& ranks) {
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    constexpr std::size_t kShown = 8;
    for (std::size_t i = 0; i < ranks.size() && i < kShown; ++i) {
        s += (i ? "," : "") + std::to_string(ranks[i]);
    }
    if (ranks.size() > kShown) s += " and " + std::to_string(ranks.size() - kShown) + " more";
    return s;
}

}  // namespace

std::string SyncTag::describe() const {
    switch (kind) {
        case SyncKind::start:
            return "starting epoch " + std::to_string(epoch) +
                   (step > 0 ? " with max_steps " + std::to_string(step) : std::string()) +
                   left_part(*this);
        case SyncKind::window:
            return "waiting for step " + std::to_string(step) + " of " + std::to_string(steps) +
                   " of epoch " + std::to_string(epoch);
        case SyncKind::exchange:
            return "waiting to exchange step " + std::to_string(step) + " of " +
                   std::to_string(steps) + " of epoch " + std::to_string(epoch);
        case SyncKind::close:
            return "closing (destroying) the loader" + left_part(*this);
    }
    return "in an unknown loader call";
}

std::string describe_mismatch(const std::vector<SyncTag>& tags) {
    bool all_start = true;
    bool all_left = true;  // only start and close calls
    bool same_left = true;
    for (const SyncTag& t : tags) {
        all_start = all_start && t.kind == SyncKind::start;
        all_left = all_left && (t.kind == SyncKind::start || t.kind == SyncKind::close);
        same_left = same_left && t.left_epoch == tags[0].left_epoch &&
                    t.left_step == tags[0].left_step;
    }
    std::string head;
    if (all_start && same_left) {
        head = "loader: ranks asked for different epochs (or max_steps)";
    } else if (all_left && !same_left) {
        head = "loader: ranks left an epoch at different steps";
    } else {
        head = "loader: ranks are in different loader calls (an epoch left early on some ranks, "
               "or the loader destroyed on some ranks while others still use it)";
    }
    // Ranks with the same text in one group, groups in order of their lowest rank.
    std::vector<std::string> order;
    std::map<std::string, std::vector<int>> groups;
    for (std::size_t r = 0; r < tags.size(); ++r) {
        const std::string d = tags[r].describe();
        if (!groups.count(d)) order.push_back(d);
        groups[d].push_back(static_cast<int>(r));
    }
    std::string body;
    for (const std::string& d : order) {
        body += (body.empty() ? ": " : "; ") + ranks_text(groups[d]) + ": " + d;
    }
    return head + body +
           ". Every rank must leave an epoch at the same step: consume it to its end, or end it "
           "early collectively (EpochOptions::max_steps, EpochRange::request_stop or "
           "mpistage::request_stop; docs/architecture.md, \"Ending an epoch early\")";
}

}  // namespace mpistage::detail
