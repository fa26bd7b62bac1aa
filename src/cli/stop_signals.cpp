// --stop-signals names and numbers.
#include "cli/stop_signals.hpp"

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "mpistage/error.hpp"

namespace mpistage::cli {

namespace {

constexpr std::pair<const char*, int> kNames[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
    {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"XCPU", SIGXCPU},
};

}  // namespace

std::string signal_name(int signo) {
    for (const auto& [name, number] : kNames) {
        if (number == signo) return name;
    }
    return std::to_string(signo);
}

std::vector<int> parse_stop_signals(const std::string& list) {
    std::vector<int> out;
    if (list == "none") return out;
    std::istringstream in(list);
    for (std::string word; std::getline(in, word, ',');) {
        std::string name = word.rfind("SIG", 0) == 0 ? word.substr(3) : word;
        int signo = 0;
        for (const auto& [n, number] : kNames) {
            if (name == n) signo = number;
        }
        const bool digits =
            !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
        if (signo == 0 && digits && name.size() < 4) {
            signo = std::atoi(name.c_str());
        }
        if (signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP) {
            throw ConfigError("stage: --stop-signals: '" + word +
                              "' is not a signal that can be caught (names: HUP, INT, QUIT, USR1, "
                              "USR2, ALRM, TERM, XCPU, with or without SIG, or a number; 'none' "
                              "for no signal)");
        }
        out.push_back(signo);
    }
    if (out.empty()) throw ConfigError("stage: --stop-signals is empty (give 'none' for none)");
    return out;
}

}  // namespace mpistage::cli
