#pragma once
// Stage flags that apply to some input formats only (internal to the CLI).

#include <string>

#include "cli/args.hpp"

namespace mpistage::cli {

/// Local, pure: refuses flags that do not apply to `format` ("hdf5", "idx" or "tfrecord")
/// instead of ignoring them: --feature, --index and --on-corrupt are for TFRecord input only,
/// --field for HDF5 and IDX input (TFRecord fields are named by --feature).
/// @throws ConfigError naming the flag, the format and the file.
void check_flags_apply(const StageArgs& a, const std::string& format);

}  // namespace mpistage::cli
