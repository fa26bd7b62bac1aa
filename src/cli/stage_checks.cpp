// The local checks of `mpistage stage` (stage_checks.hpp).
#include "cli/stage_checks.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cli/atomic_file.hpp"
#include "cli/open_source.hpp"
#include "cli/stage_inputs.hpp"
#include "cli/stop_signals.hpp"
#include "mpistage/error.hpp"

namespace mpistage::cli {

LocalChecks check_locally(const Communicator& comm, const StageArgs& a) {
    if (a.first_epoch + a.epochs < a.first_epoch) {
        throw ConfigError("stage: --first-epoch + --epochs overflows 64 bits");
    }
    if (a.save_every > 0 && a.save_state.empty()) {
        throw ConfigError("stage: --save-every needs --save-state FILE");
    }
    LocalChecks c;
    c.input.budget = a.budget();
    if (a.stream()) {
        c.input.kind = InputKind::sqlite;
        c.input.path = a.sqlite;
    } else {
        probe_stage_inputs(a);
        c.format = detect_format(a);
        c.input.kind = input_kind_of_format(c.format);
        c.input.path = a.files.front();
    }
    if (a.stream() && a.was_given("files")) {
        throw ConfigError("stage: --sqlite does not apply to FILE input ('" + a.files.front() +
                          "'): give FILE(s) or --sqlite DB, not both");
    }
    refuse_inapplicable_flags(a, c.input);
    c.stop_signals = parse_stop_signals(a.stop_signals);
    if (comm.rank() == 0) {
        if (!a.json.empty()) check_json_destination(a.json);
        if (!a.save_state.empty()) check_destination(a.save_state, "--save-state file");
        if (!a.ids_out.empty()) check_destination(a.ids_out, "--ids-out file");
        if (!a.stop_marker.empty()) {
            check_destination(a.stop_marker, "--stop-marker file");
            // A marker left by an earlier run must not speak for this one.
            if (output_kind(a.stop_marker, "--stop-marker file") == OutputKind::replace &&
                ::unlink(a.stop_marker.c_str()) != 0 && errno != ENOENT) {
                throw ConfigError("stage: cannot remove the --stop-marker file '" + a.stop_marker +
                                  "' of an earlier run: " + std::strerror(errno));
            }
        }
    }
    if (!a.resume.empty()) {
        c.resume = read_saved_state(a.resume);
        const std::uint64_t end = a.first_epoch + a.epochs;
        if (c.resume->epoch() >= end) {
            throw ConfigError(
                "stage: --resume file '" + a.resume + "' stands at epoch " +
                std::to_string(c.resume->epoch()) + " (step " + std::to_string(c.resume->steps()) +
                "), not before the end of the epochs to run (--first-epoch " +
                std::to_string(a.first_epoch) + " + --epochs " + std::to_string(a.epochs) + " = " +
                std::to_string(end) + "): nothing would be staged; raise --epochs to go on");
        }
        if (c.resume->stream() != a.stream()) {
            throw ConfigError("stage: --resume file '" + a.resume + "' holds the state of " +
                              (a.stream() ? "FILE input" : "a --sqlite stream") + ", not of " +
                              input_kind_name(c.input.kind) + " input");
        }
        if (c.resume->stream()) {
            c.prior_count = c.resume->loader.samples_consumed;
            if (a.verify && comm.rank() == 0) {
                c.prior_ids = StreamInput::consumed_ids(c.resume->loader);
            }
        } else {
            c.prior_count = c.resume->ids_path.empty() ? 0 : c.resume->ids_count;
            if (a.verify && comm.rank() == 0) c.prior_ids = read_id_log(*c.resume);
        }
    }
    return c;
}

}  // namespace mpistage::cli
