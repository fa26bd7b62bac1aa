// Stage flags that apply to some input formats only: refused, not silently ignored.
#include "cli/format_flags.hpp"

#include "mpistage/error.hpp"

namespace mpistage::cli {

namespace {

[[noreturn]] void not_for(const std::string& flag, const std::string& format, const StageArgs& a,
                          const std::string& advice) {
    const std::string how = a.format == "auto" ? "detected as " : "given as --format ";
    throw ConfigError("stage: " + flag + " does not apply to " + format + " input ('" +
                      a.files.front() + "' " + how + format + "); " + advice);
}

}  // namespace

void check_flags_apply(const StageArgs& a, const std::string& format) {
    if (format != "tfrecord") {
        const std::string advice = format == "hdf5" ? "name HDF5 datasets with --field"
                                                    : "name the IDX files' fields with --field";
        if (!a.features.empty()) not_for("--feature", format, a, advice);
        if (!a.index_paths.empty()) not_for("--index", format, a, "it is for TFRecord input");
        if (a.on_corrupt != "error") not_for("--on-corrupt", format, a, "it is for TFRecord input");
        return;
    }
    if (!a.fields.empty()) {
        not_for("--field", format, a,
                "name tf.train.Example features with --feature NAME:TYPE[:SHAPE]");
    }
}

}  // namespace mpistage::cli
