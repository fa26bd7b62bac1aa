// Sources of samples by id (HDF5, IDX, TFRecord/Example) and the Loader with its epochs. Every
// call that can wait (collectives, reads) releases the GIL.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "interruptible.hpp"

namespace mpistage::python {

namespace {

SourceFormat parse_format(const std::string& s) {
    if (s == "auto") return SourceFormat::automatic;
    if (s == "hdf5") return SourceFormat::hdf5;
    if (s == "idx") return SourceFormat::idx;
    if (s == "tfrecord") return SourceFormat::tfrecord;
    throw ConfigError("source format '" + s + "' is not one of auto, hdf5, idx, tfrecord");
}

std::unique_ptr<Source> open(std::int64_t comm, const std::vector<std::string>& paths,
                             const std::string& format, const std::vector<std::string>& fields,
                             const std::vector<std::string>& index_paths,
                             const std::string& on_corrupt,
                             const std::vector<std::string>& features, std::int64_t timeout_s) {
    OpenOptions o;
    o.format = parse_format(format);
    o.fields = fields;
    o.index_paths = index_paths;
    o.on_corrupt = parse_on_corrupt(on_corrupt);
    for (const std::string& f : features) o.features.push_back(parse_feature_spec(f));
    py::gil_scoped_release unlocked;
    return open_source(comm_ref(comm, std::chrono::seconds(timeout_s)), paths, o);
}

py::dict stats_to_python(const LoaderStats& s) {
    py::dict d;
    d["batches"] = s.batches;
    d["valid_samples"] = s.valid_samples;
    d["padding_slots"] = s.padding_slots;
    d["oversize_batches"] = s.oversize_batches;
    d["bytes_read"] = s.bytes_read;
    d["wait_s"] = s.wait_time.count();
    d["wait_io_s"] = s.wait_io_time.count();
    d["wait_peers_s"] = s.wait_peers_time.count();
    d["epoch_s"] = s.epoch_time.count();
    d["records_in_cut"] = s.records_in_cut;
    d["records_moved"] = s.records_moved;
    d["pinned"] = s.pinned;
    d["device"] = s.device.name();
    d["tier"] = s.tier;
    d["tier_note"] = s.tier_note;
    d["two_phase"] = s.two_phase;
    d["two_phase_note"] = s.two_phase_note;
    d["shuffle_note"] = s.shuffle_note;
    d["staged_bytes"] = s.staged_bytes;
    d["stage_s"] = s.stage_time.count();
    d["stage_read_method"] = s.stage_read_method;
    d["stage_read_note"] = s.stage_read_note;
    // As the CLI's --json ranks[] (cli::FileInput::totals): host -> device copies.
    d["h2d_bytes"] = s.staging.bytes_copied;
    d["h2d_seconds"] = s.staging.copy_seconds;
    // Streams (zero for files): LoaderStats::stream.
    d["tokens"] = s.stream.tokens;
    d["padding_tokens"] = s.stream.padding_tokens;
    d["items_read"] = s.stream.items_read;
    d["items_sent"] = s.stream.items_sent;
    d["extra_rounds"] = s.stream.extra_rounds;
    d["agreements"] = s.stream.agreements;
    d["io_threads"] = s.stream.io_threads;
    return d;
}

py::dict totals_to_python(const EpochTotals& t) {
    py::dict d;
    d["steps"] = t.steps;
    d["valid_samples"] = t.valid_samples;
    d["padding_slots"] = t.padding_slots;
    d["dropped_samples"] = t.dropped_samples;
    return d;
}

std::unique_ptr<Loader> make_loader(std::int64_t comm, const Source& source,
                                    const LoaderOptions& options) {
    py::gil_scoped_release unlocked;
    return std::make_unique<Loader>(comm_ref(comm), source, options);
}

std::unique_ptr<Loader> restore_loader(std::int64_t comm, const Source& source,
                                       const LoaderOptions& options, const std::string& state) {
    const LoaderState parsed = LoaderState::from_json(state, "python state");
    py::gil_scoped_release unlocked;
    return std::make_unique<Loader>(Loader::restore(comm_ref(comm), source, options, parsed));
}

// The same Loader over a StreamSource (Loader(comm, stream_source, options)).
std::unique_ptr<Loader> make_stream_loader(std::int64_t comm, const StreamSource& source,
                                           const LoaderOptions& options) {
    py::gil_scoped_release unlocked;
    return std::make_unique<Loader>(comm_ref(comm), source, options);
}

std::unique_ptr<Loader> restore_stream_loader(std::int64_t comm, const StreamSource& source,
                                              const LoaderOptions& options,
                                              const std::string& state) {
    const LoaderState parsed = LoaderState::from_json(state, "python state");
    py::gil_scoped_release unlocked;
    return std::make_unique<Loader>(Loader::restore(comm_ref(comm), source, options, parsed));
}

// Interruptible by Ctrl-C while it waits for data or peers (interruptible.hpp). With `loader`
// (the range's own loader), `Loader::set_cuda_stream(cuda_stream)` first, in the same call (on
// the worker thread, never beside a next() still running from an interrupted call).
py::object next_batch(const py::object& self, const py::object& loader,
                      std::uintptr_t cuda_stream) {
    EpochRange& range = self.cast<EpochRange&>();
    Loader* const owner = loader.is_none() ? nullptr : loader.cast<Loader*>();
    void* const stream = reinterpret_cast<void*>(cuda_stream);
    HostBatch batch;
    const bool more = interruptible_next(
        self,
        [&range, owner, stream](HostBatch& b) {
            if (owner) owner->set_cuda_stream(stream);
            return range.next(b);
        },
        batch);
    if (!more) throw py::stop_iteration();
    return batch_to_python(std::move(batch));
}

// Collective for HDF5 and TFRecord (their close() is; Python calls it on every rank): closes the
// files of a source open_source made. Reads after it throw the source's ConfigError.
void close_source(Source& source) {
    settle();
    py::gil_scoped_release unlocked;
    if (auto* h5 = dynamic_cast<Hdf5Source*>(&source)) {
        h5->close();
    } else if (auto* tf = dynamic_cast<TfRecordSource*>(&source)) {
        tf->close();
    } else if (auto* raw = dynamic_cast<RawSource*>(&source)) {
        raw->close();
    } else {
        throw ConfigError("Source.close(): this kind of source cannot be closed");
    }
}

}  // namespace

void bind_loader(py::module_& m) {
    py::class_<Source, std::unique_ptr<Source>>(m, "Source")
        .def_property_readonly("fields",
                               [](const Source& s) { return fields_to_python(s.fields()); })
        .def_property_readonly("num_samples", &Source::num_samples)
        .def_property_readonly("fingerprint", &Source::fingerprint)
        .def_property_readonly("notes", &Source::notes)
        .def("close", &close_source,
             "Collective: closes the source's files (Hdf5Source / TfRecordSource / "
             "RawSource::close); later reads throw ConfigError naming them.");
    m.def("open_source", &open, py::arg("comm"), py::arg("paths"), py::arg("format"),
          py::arg("fields"), py::arg("index_paths"), py::arg("on_corrupt"), py::arg("features"),
          py::arg("timeout_s"), "Collective: opens files as a Source (mpistage::open_source).");

    py::class_<EpochRange, std::unique_ptr<EpochRange>>(m, "EpochRange")
        .def_property_readonly("steps", &EpochRange::steps)
        .def_property_readonly("steps_done", &EpochRange::steps_done)
        .def_property_readonly("last_oversize", &EpochRange::last_oversize)
        .def_property_readonly("stopped",
                               [](const EpochRange& r) {
                                   settle();
                                   return r.stopped();
                               })
        .def("request_stop", &EpochRange::request_stop)
        .def_property_readonly("totals",
                               [](const EpochRange& r) {
                                   settle();
                                   return totals_to_python(r.totals());
                               })
        .def("next", &next_batch, py::arg("loader") = py::none(), py::arg("cuda_stream") = 0,
             "Collective: the next batch tuple; StopIteration at the end. Interruptible: a "
             "signal's exception (KeyboardInterrupt) is raised within about 50 ms. With "
             "`loader` (this range's Loader), its batches are first ordered on `cuda_stream` "
             "(a cudaStream_t as an int, 0: the legacy default stream; "
             "Loader::set_cuda_stream).");
    m.def("settle", &settle,
          "Local: waits for a next() that Ctrl-C interrupted to complete (it completes with "
          "the peers) and drops its batch. Called before other loader calls and at exit.");

    py::class_<Loader, std::unique_ptr<Loader>>(m, "Loader")
        .def(py::init(&make_loader), py::arg("comm"), py::arg("source"), py::arg("options"),
             py::keep_alive<1, 3>())
        .def(py::init(&make_stream_loader), py::arg("comm"), py::arg("source"), py::arg("options"),
             py::keep_alive<1, 3>())
        .def_static("restore", &restore_loader, py::arg("comm"), py::arg("source"),
                    py::arg("options"), py::arg("state_json"), py::keep_alive<0, 2>())
        .def_static("restore", &restore_stream_loader, py::arg("comm"), py::arg("source"),
                    py::arg("options"), py::arg("state_json"), py::keep_alive<0, 2>())
        .def_property_readonly("is_stream",
                               [](const Loader& l) { return l.input() == LoaderInput::stream; })
        .def(
            "epoch",
            [](Loader& l, std::uint64_t e, std::uint64_t max_steps) {
                settle();
                EpochOptions o;
                o.max_steps = max_steps;
                py::gil_scoped_release unlocked;
                return std::make_unique<EpochRange>(l.epoch(e, o));
            },
            py::arg("epoch"), py::arg("max_steps") = 0, py::keep_alive<0, 1>())
        .def("state_json",
             [](const Loader& l) {
                 settle();
                 return l.state().to_json();
             })
        .def("close",
             [](Loader& l) {
                 settle();
                 py::gil_scoped_release unlocked;
                 l.close();
             })
        .def_property_readonly("num_samples", &Loader::num_samples)
        .def_property_readonly("totals",
                               [](const Loader& l) { return totals_to_python(l.totals()); })
        .def_property_readonly("stats",
                               [](const Loader& l) {
                                   settle();
                                   return stats_to_python(l.stats());
                               })
        .def_property_readonly("rank", [](const Loader& l) { return l.comm().rank(); })
        .def_property_readonly("world_size", [](const Loader& l) { return l.comm().size(); });
}

}  // namespace mpistage::python
