// Opening the source of `mpistage stage` so that ranks never enter different collectives: every
// path is probed before anything opens it, and the detected format is agreed first.
#include "cli/open_source.hpp"

#include <cstring>
#include <fstream>

#include "mpistage/error.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/raw_source.hpp"
#include "mpistage/tfrecord_source.hpp"
#include "util/input_file.hpp"

namespace mpistage::cli {

namespace {

bool looks_like_hdf5(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    char sig[8] = {0};
    in.read(sig, 8);
    return in.gcount() == 8 && std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0;
}

bool looks_like_idx(const std::string& path) {
    return path.find("idx") != std::string::npos || path.find("ubyte") != std::string::npos;
}

bool looks_like_tfrecord(const std::string& path) {
    for (const char* s : {".tfrecord", ".tfrecords", ".tfr"}) {
        if (path.find(s) != std::string::npos) return true;
    }
    // Whole-file gzip TFRecords (TensorFlow, Beam, TFX) usually end in .gz without a hint.
    return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0 && !looks_like_idx(path);
}

std::vector<RawField> idx_fields(const StageArgs& a) {
    std::vector<RawField> fields;
    for (std::size_t i = 0; i < a.files.size(); ++i) {
        const std::string name = i < a.fields.size() ? a.fields[i] : "field" + std::to_string(i);
        fields.push_back(parse_idx_header(a.files[i], name));
    }
    return fields;
}

TfRecordOptions tfrecord_options(const StageArgs& a) {
    TfRecordOptions o;
    o.index_paths = a.index_paths;
    o.on_corrupt = parse_on_corrupt(a.on_corrupt);
    for (const auto& f : a.features) o.features.push_back(parse_feature_spec(f));
    o.validate();
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
    const std::string& first = a.files.front();
    return looks_like_hdf5(first)       ? "hdf5"
           : looks_like_tfrecord(first) ? "tfrecord"
           : looks_like_idx(first)      ? "idx"
                                        : "hdf5";
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
    if (format == "hdf5") {
        if (a.files.size() != 1) {  // the same on every rank: the files are agreed
            throw ConfigError("stage: the HDF5 source reads one file; got " +
                              std::to_string(a.files.size()));
        }
        Hdf5Options o;
        o.fields = a.fields;
        return std::make_unique<Hdf5Source>(comm, a.files.front(), o);
    }
    if (format == "idx") {
        return std::make_unique<RawSource>(comm,
                                           run_agreed_value(comm, [&] { return idx_fields(a); }));
    }
    const TfRecordOptions o = run_agreed_value(comm, [&] { return tfrecord_options(a); });
    return std::make_unique<TfRecordSource>(comm, a.files, o);
}

}  // namespace mpistage::cli
