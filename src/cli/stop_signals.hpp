#pragma once
// `mpistage stage --stop-signals`: the signals that stop a run at the next agreed step on every
// rank (internal to the CLI; docs/resume.md, "Stopping on a signal").

#include <string>
#include <vector>

namespace mpistage::cli {

/// Exit code of a run that a stop signal ended (state saved when --save-state was given):
/// EX_TEMPFAIL of sysexits.h, "try again later", which a requeued job then does.
constexpr int kExitStopped = 75;

/// Local: the signal numbers of a --stop-signals list ("USR1,TERM", "SIGUSR2", "10", "none").
/// @throws ConfigError naming the entry that is not a catchable signal.
std::vector<int> parse_stop_signals(const std::string& list);

/// "USR1" for SIGUSR1, else the number.
std::string signal_name(int signo);

}  // namespace mpistage::cli
