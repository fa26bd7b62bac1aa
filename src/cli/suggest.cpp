// Helpful command-line errors: unknown options and commands with the closest valid name, and
// choice options that list their choices (see suggest.hpp).
#include "cli/suggest.hpp"

#include <algorithm>
#include <cctype>

#include "mpistage/error.hpp"

namespace mpistage::cli {

namespace {

// Lower case without leading dashes, '-' and '_' (so "--batchsize" ~ "--batch-size").
std::string normalized(const std::string& word) {
    std::string out;
    for (char c : word) {
        if (c != '-' && c != '_')
            out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return out;
}

// Optimal string alignment distance (insertions, deletions, substitutions, transpositions).
std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
            }
        }
    }
    return d[a.size()][b.size()];
}

std::string quoted_list(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
    return out;
}

bool looks_like_option(const std::string& w) {
    if (w.size() < 2 || w[0] != '-') return false;
    const char c = w[1] == '-' && w.size() > 2 ? w[2] : w[1];
    return std::isalpha(static_cast<unsigned char>(c)) != 0;
}

// Every name of every option of `cmd` with its dashes ("--batch-size", "-b").
std::vector<std::string> option_names(const CLI::App& cmd) {
    std::vector<std::string> names;
    for (const CLI::Option* o : cmd.get_options()) {
        for (const auto& l : o->get_lnames()) names.push_back("--" + l);
        for (const auto& s : o->get_snames()) names.push_back("-" + s);
    }
    return names;
}

std::vector<std::string> command_names(const CLI::App& cmd) {
    std::vector<std::string> names;
    for (const CLI::App* sub : cmd.get_subcommands({})) names.push_back(sub->get_name());
    return names;
}

const CLI::App* find_command(const CLI::App& cmd, const std::string& name) {
    for (const CLI::App* sub : cmd.get_subcommands({})) {
        if (sub->get_name() == name) return sub;
    }
    return nullptr;
}

// The option `word` ("--name", "--name=value", "-n", "-nVALUE") names in `cmd`, or nullptr.
const CLI::Option* find_option(const CLI::App& cmd, const std::string& word) {
    const std::string name = word.substr(0, word.find('='));
    if (const CLI::Option* o = cmd.get_option_no_throw(name)) return o;
    if (word[1] != '-' && word.size() > 2) return cmd.get_option_no_throw(word.substr(0, 2));
    return nullptr;
}

[[noreturn]] void unknown(const std::string& what, const std::string& word, const std::string& path,
                          const std::vector<std::string>& candidates) {
    std::string msg = "unknown " + what + " '" + word + "' for '" + path + "'";
    const std::string best = closest_match(word.substr(0, word.find('=')), candidates);
    if (!best.empty()) msg += "; did you mean '" + best + "'?";
    if (what == "command") msg += " (commands: " + quoted_list(candidates) + ")";
    throw ConfigError(msg + " (see " + path + " --help)");
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
    const std::string w = normalized(word);
    if (w.empty()) return {};
    const std::size_t limit = w.size() <= 2 ? 0 : w.size() <= 5 ? 1 : w.size() <= 9 ? 2 : 3;
    std::string best;
    std::size_t best_distance = limit + 1;
    std::vector<std::string> prefixed;
    for (const auto& c : candidates) {
        const std::string n = normalized(c);
        const std::size_t d = edit_distance(w, n);
        if (d < best_distance) {
            best_distance = d;
            best = c;
        }
        if (w.size() >= 3 && n.compare(0, w.size(), w) == 0) prefixed.push_back(c);
    }
    if (best.empty() && prefixed.size() == 1) return prefixed.front();
    return best;
}

void check_command_words(const CLI::App& app, int argc, const char* const* argv) {
    const CLI::App* cmd = &app;
    std::string path = app.get_name().empty() ? "mpistage" : app.get_name();
    bool positional_seen = false;
    for (int i = 1; i < argc; ++i) {
        const std::string w = argv[i];
        if (w == "--") return;  // the rest is positional
        if (looks_like_option(w)) {
            const CLI::Option* o = find_option(*cmd, w);
            if (o == nullptr) unknown("option", w, path, option_names(*cmd));
            // A value-taking option given as "--name VALUE": skip VALUE (it may start with '-').
            const bool attached = w.find('=') != std::string::npos || (w[1] != '-' && w.size() > 2);
            if (o->get_type_size() != 0 && !attached) ++i;
            continue;
        }
        if (positional_seen || cmd->get_subcommands({}).empty()) {
            positional_seen = true;
            continue;
        }
        const CLI::App* sub = find_command(*cmd, w);
        if (sub == nullptr) unknown("command", w, path, command_names(*cmd));
        cmd = sub;
        path += " " + w;
    }
}

namespace {

CLI::Validator one_of(std::vector<std::string> choices) {
    std::string desc = "{";
    for (const auto& c : choices) desc += (desc.size() > 1 ? "," : "") + c;
    desc += "}";
    return CLI::Validator(
        [choices](std::string& value) -> std::string {
            if (std::find(choices.begin(), choices.end(), value) != choices.end()) return {};
            std::string msg = "'" + value + "' is not one of " + quoted_list(choices);
            const std::string best = closest_match(value, choices);
            if (!best.empty()) msg += "; did you mean '" + best + "'?";
            return msg;
        },
        desc, "CHOICE");
}

void add_choices(CLI::App* cmd, const std::string& option, std::vector<std::string> choices) {
    if (cmd == nullptr) return;
    if (CLI::Option* o = cmd->get_option_no_throw(option)) o->check(one_of(std::move(choices)));
}

CLI::App* sub(CLI::App* cmd, const std::string& name) {
    if (cmd == nullptr) return nullptr;
    for (CLI::App* s : cmd->get_subcommands([](CLI::App*) { return true; })) {
        if (s->get_name() == name) return s;
    }
    return nullptr;
}

}  // namespace

void add_choice_checks(CLI::App& app) {
    CLI::App* stage = sub(&app, "stage");
    add_choices(stage, "--format", {"auto", "hdf5", "idx", "tfrecord"});
    add_choices(stage, "--shuffle", {"none", "local", "global", "chunks"});
    add_choices(stage, "--sharding", {"byte_range", "global"});
    add_choices(stage, "--remainder", {"drop", "pad", "mask"});
    add_choices(stage, "--on-corrupt", {"error", "skip"});
    add_choices(stage, "--on-dry", {"rebalance", "mask"});
    add_choices(stage, "--progress", {"auto", "bar", "lines", "none"});
    add_choices(stage, "--two-phase", {"off", "on", "auto"});
    add_choices(sub(sub(&app, "convert"), "idx"), "--format", {"hdf5", "tfrecord"});
}

}  // namespace mpistage::cli
