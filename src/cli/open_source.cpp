// Opening the source of `mpistage stage`: the CLI's flags mapped onto the library's
// `open_source` (mpistage/open.hpp), with the CLI's own messages for its flags and for a
// format that differs between ranks.
#include "cli/open_source.hpp"

#include "comm/agree.hpp"
#include "mpistage/error.hpp"
#include "mpistage/open.hpp"
#include "util/input_file.hpp"

namespace mpistage::cli {

namespace {

/// The library's options for `a` (the format already detected and agreed).
OpenOptions open_options(const StageArgs& a, const std::string& format) {
    OpenOptions o;
    o.format = format == "idx"        ? SourceFormat::idx
               : format == "tfrecord" ? SourceFormat::tfrecord
                                      : SourceFormat::hdf5;
    o.fields = a.fields;
    o.index_paths = a.index_paths;
    o.on_corrupt = parse_on_corrupt(a.on_corrupt);
    for (const auto& f : a.features) o.features.push_back(parse_feature_spec(f));
    return o;
}

}  // namespace

void probe_stage_inputs(const StageArgs& a) {
    for (const auto& f : a.files) detail::probe_input_file(f, "stage: FILE");
    for (const auto& f : a.index_paths) detail::probe_input_file(f, "stage: --index");
}

std::string detect_format(const StageArgs& a) {
    if (a.format == "hdf5" || a.format == "idx" || a.format == "tfrecord") return a.format;
    if (a.format != "auto") {
        throw ConfigError("stage: unknown --format '" + a.format +
                          "' (expected auto, hdf5, idx or tfrecord)");
    }
    return to_string(detect_source_format(a.files.front()));
}

void require_same_format(const Communicator& comm, const StageArgs& a, const std::string& format) {
    require_same(comm,
                 "the source type (--format " + a.format + ", FILE '" + a.files.front() + "')",
                 format, "stage",
                 "the same path names different kinds of file on different ranks (nodes); every "
                 "rank must see the same files");
}

std::unique_ptr<Source> open_source(const Communicator& comm, const StageArgs& a,
                                    const std::string& format) {
    const OpenOptions o = run_agreed_value(comm, [&] { return open_options(a, format); });
    return mpistage::open_source(comm, a.files, o);
}

}  // namespace mpistage::cli
