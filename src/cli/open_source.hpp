#pragma once
// Opening the source of `mpistage stage`: the CLI's flags onto the library's `open_source`
// (mpistage/open.hpp), which detects, agrees and opens (internal to the CLI).

#include <memory>
#include <string>

#include "cli/args.hpp"
#include "mpistage/comm.hpp"
#include "mpistage/source.hpp"

namespace mpistage::cli {

/// Local: checks every input path of `a` (FILE..., --index ...) with
/// `detail::probe_input_file`, so no rank opens a FIFO (which would block it in open) and a
/// missing file and a permission problem are told apart.
/// @throws IoError, ConfigError naming the flag and the path.
void probe_stage_inputs(const StageArgs& a);

/// Local: the source type to open: `a.format` unless it is "auto", else
/// `detect_source_format` of the first FILE.
/// Call after `probe_stage_inputs` (it reads 8 bytes of the file).
/// @throws ConfigError for an unknown --format.
std::string detect_format(const StageArgs& a);

/// Collective: checks that every rank is about to open the same source type (the format
/// detected on one node may differ when the same path names different files): the same
/// ConfigError on every rank when it differs. @throws ConfigError (agreed), MpiError.
void require_same_format(const Communicator& comm, const StageArgs& a, const std::string& format);

/// Collective: `mpistage::open_source` of type `format` (agreed) over `a.files`. Option errors
/// (--on-corrupt, --feature, IDX headers) are agreed before the source's own collectives.
/// @throws the source's errors, identical on every rank.
std::unique_ptr<Source> open_source(const Communicator& comm, const StageArgs& a,
                                    const std::string& format);

}  // namespace mpistage::cli
