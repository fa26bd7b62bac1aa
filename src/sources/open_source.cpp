// Opening a source from its paths (mpistage/open.hpp): probe, detect, agree, then open, so
// ranks never enter different collectives.
#include <cstring>
#include <fstream>

#include "comm/agree.hpp"
#include "comm/call_comm.hpp"
#include "mpistage/error.hpp"
#include "mpistage/hdf5_source.hpp"
#include "mpistage/open.hpp"
#include "mpistage/raw_source.hpp"
#include "util/input_file.hpp"

namespace mpistage {

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

std::vector<RawField> idx_fields(const std::vector<std::string>& paths, const OpenOptions& o) {
    std::vector<RawField> fields;
    for (std::size_t i = 0; i < paths.size(); ++i) {
        const std::string name = i < o.fields.size() ? o.fields[i] : "field" + std::to_string(i);
        fields.push_back(parse_idx_header(paths[i], name));
    }
    return fields;
}

TfRecordOptions tfrecord_options(const OpenOptions& o) {
    TfRecordOptions t;
    t.index_paths = o.index_paths;
    t.on_corrupt = o.on_corrupt;
    t.features = o.features;
    t.validate();
    return t;
}

}  // namespace

std::string to_string(SourceFormat format) {
    switch (format) {
        case SourceFormat::hdf5:
            return "hdf5";
        case SourceFormat::idx:
            return "idx";
        case SourceFormat::tfrecord:
            return "tfrecord";
        case SourceFormat::automatic:
            break;
    }
    return "auto";
}

SourceFormat detect_source_format(const std::string& path) {
    detail::probe_input_file(path, "open_source: path");
    return looks_like_hdf5(path)       ? SourceFormat::hdf5
           : looks_like_tfrecord(path) ? SourceFormat::tfrecord
           : looks_like_idx(path)      ? SourceFormat::idx
                                       : SourceFormat::hdf5;
}

std::unique_ptr<Source> open_source(CommRef ref, const std::vector<std::string>& paths,
                                    const OpenOptions& options) {
    // The agreements below run on the caller's Communicator, or on a duplicate of a plain
    // MPI_Comm that the source then takes over (HDF5) or borrows (IDX, TFRecord): one
    // MPI_Comm_dup in all for the call.
    detail::CallComm call(ref);
    const Communicator& comm = call.get();
    const SourceFormat format = run_agreed_value(comm, [&] {
        if (paths.empty()) throw ConfigError("open_source: no paths to open");
        for (const auto& p : paths) detail::probe_input_file(p, "open_source: path");
        for (const auto& p : options.index_paths) {
            detail::probe_input_file(p, "open_source: index path");
        }
        return options.format == SourceFormat::automatic ? detect_source_format(paths.front())
                                                         : options.format;
    });
    require_same(
        comm,
        {{"the source format (" + to_string(options.format) + ", path '" + paths.front() + "')",
          to_string(format)},
         {"the number of paths", std::to_string(paths.size())}},
        "open_source",
        "the same path names different kinds of file on different ranks (nodes), or "
        "ranks were given different paths; every rank must open the same files");
    if (format == SourceFormat::hdf5) {
        if (paths.size() != 1) {  // the same on every rank: the count was agreed
            throw ConfigError("open_source: the HDF5 source reads one file; got " +
                              std::to_string(paths.size()));
        }
        Hdf5Options o;
        o.fields = options.fields;
        return std::make_unique<Hdf5Source>(call.pass(), paths.front(), o);  // `comm` unused after
    }
    if (format == SourceFormat::idx) {
        return std::make_unique<RawSource>(
            comm, run_agreed_value(comm, [&] { return idx_fields(paths, options); }));
    }
    const TfRecordOptions o = run_agreed_value(comm, [&] { return tfrecord_options(options); });
    return std::make_unique<TfRecordSource>(comm, paths, o);
}

}  // namespace mpistage
