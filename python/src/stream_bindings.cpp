// Streams from Python: a user's Python iterables as a CallableStreamSource (the C++ stream
// machinery does the sharding, batching and end-of-stream agreement), the SQLite source, and
// the StreamLoader. Python code runs only inside the generators, under the GIL; the loader's
// waits release it.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "interruptible.hpp"

namespace mpistage::python {

namespace {

// A Python object that may be released from C++ code running without the GIL.
std::shared_ptr<py::object> hold(py::object o) {
    return {new py::object(std::move(o)), [](py::object* p) {
                py::gil_scoped_acquire locked;
                delete p;
            }};
}

// Copies one item `(key, values)` of stream `stream` into `out`; `key` None: the content hash.
void fill_sample(const py::handle& item, const std::vector<FieldInfo>& fields, std::size_t stream,
                 std::uint64_t position, StreamSample& out) {
    const std::string where =
        "stream " + std::to_string(stream) + " item " + std::to_string(position) + ": ";
    const auto pair = py::reinterpret_borrow<py::tuple>(item);
    const auto values = py::reinterpret_borrow<py::sequence>(pair[1]);
    if (values.size() != fields.size()) {
        throw FormatError(where + std::to_string(values.size()) + " values for " +
                          std::to_string(fields.size()) + " fields");
    }
    out.fields.resize(fields.size());
    for (std::size_t i = 0; i < fields.size(); ++i) {
        const py::buffer_info b = py::reinterpret_borrow<py::buffer>(values[i]).request();
        const auto bytes = static_cast<std::uint64_t>(b.size * b.itemsize);
        if (!fields[i].ragged && bytes != fields[i].sample_bytes) {
            throw FormatError(where + "field '" + fields[i].name + "' has " +
                              std::to_string(bytes) + " bytes; its shape and dtype give " +
                              std::to_string(fields[i].sample_bytes));
        }
        const auto* p = static_cast<const std::byte*>(b.ptr);
        out.fields[i].assign(p, p + bytes);
    }
    const py::handle key = pair[0];
    out.key = key.is_none() ? sample_content_hash(out) : key.cast<std::uint64_t>();
}

// The generator of one stream: pulls `(key, values)` items from a Python iterator.
CallableStreamSource::Generator generator(std::shared_ptr<py::object> iterator,
                                          std::shared_ptr<const std::vector<FieldInfo>> fields,
                                          std::size_t stream) {
    auto position = std::make_shared<std::uint64_t>(0);
    return [iterator, fields, stream, position](StreamSample& out) {
        py::gil_scoped_acquire locked;
        try {
            PyObject* next = PyIter_Next(iterator->ptr());
            if (next == nullptr) {
                if (PyErr_Occurred()) throw py::error_already_set();
                return false;
            }
            const auto item = py::reinterpret_steal<py::object>(next);
            fill_sample(item, *fields, stream, *position, out);
            ++*position;
            return true;
        } catch (py::error_already_set& e) {
            throw Error("stream " + std::to_string(stream) + " item " + std::to_string(*position) +
                        ": Python raised " + e.what());
        } catch (const py::cast_error& e) {
            throw FormatError("stream " + std::to_string(stream) + " item " +
                              std::to_string(*position) + ": " + e.what());
        }
    };
}

std::vector<FieldInfo> parse_fields(const py::list& specs) {
    std::vector<FieldInfo> fields;
    for (const py::handle& h : specs) {
        const auto t = py::reinterpret_borrow<py::tuple>(h);
        FieldInfo f;
        f.name = t[0].cast<std::string>();
        f.dtype = parse_dtype(t[1].cast<std::string>());
        f.sample_shape = t[2].cast<std::vector<std::int64_t>>();
        f.ragged = t[3].cast<bool>();
        f.sample_bytes = f.ragged ? 0 : checked_sample_bytes(f.sample_shape, f.dtype, f.name);
        fields.push_back(std::move(f));
    }
    return fields;
}

std::unique_ptr<StreamSource> python_stream_source(const py::list& field_specs,
                                                   std::size_t num_streams,
                                                   const py::function& make,
                                                   const std::string& fingerprint,
                                                   const std::vector<double>& weights) {
    auto factory = hold(make);
    auto fields = std::make_shared<const std::vector<FieldInfo>>(parse_fields(field_specs));
    auto open = [factory, fields](std::size_t s) {
        py::gil_scoped_acquire locked;
        try {
            py::object it = py::iter((*factory)(s));
            return generator(hold(std::move(it)), fields, s);
        } catch (py::error_already_set& e) {
            throw Error("stream " + std::to_string(s) + ": opening it, Python raised " + e.what());
        }
    };
    return std::make_unique<CallableStreamSource>(*fields, num_streams, std::move(open),
                                                  fingerprint, weights);
}

std::unique_ptr<StreamSource> sqlite_source(std::int64_t comm, const std::string& path,
                                            const std::string& query, const std::string& key_column,
                                            const std::string& range_column,
                                            std::uint64_t range_streams, const std::string& nulls,
                                            double fill_value) {
    SqliteOptions o;
    o.path = path;
    o.query = query;
    o.key_column = key_column;
    o.range_column = range_column;
    o.range_streams = range_streams;
    if (nulls == "error")
        o.nulls = SqliteNulls::error;
    else if (nulls == "mask")
        o.nulls = SqliteNulls::mask;
    else if (nulls == "fill")
        o.nulls = SqliteNulls::fill;
    else
        throw ConfigError("sqlite nulls '" + nulls + "' is not one of error, mask, fill");
    o.fill_value = fill_value;
    py::gil_scoped_release unlocked;
    return std::make_unique<SqliteSource>(comm_ref(comm), std::move(o));
}

py::dict stream_stats(const StreamStats& s) {
    py::dict d;
    d["batches"] = s.batches;
    d["valid_samples"] = s.valid_samples;
    d["padding_slots"] = s.padding_slots;
    d["payload_bytes"] = s.payload_bytes;
    d["tokens"] = s.tokens;
    d["padding_tokens"] = s.padding_tokens;
    d["oversize_batches"] = s.oversize_batches;
    d["items_read"] = s.items_read;
    d["items_sent"] = s.items_sent;
    d["extra_rounds"] = s.extra_rounds;
    d["agreements"] = s.agreements;
    d["wait_peers_seconds"] = s.wait_peers_time.count();
    d["wait_io_seconds"] = s.wait_io_time.count();
    d["io_threads"] = s.io_threads;
    return d;
}

std::unique_ptr<StreamLoader> make_stream_loader(std::int64_t comm, const StreamSource& source,
                                                 const StreamOptions& options,
                                                 const py::object& resume_json) {
    std::unique_ptr<StreamState> state;
    if (!resume_json.is_none()) {
        state =
            std::make_unique<StreamState>(StreamState::from_json(resume_json.cast<std::string>()));
    }
    py::gil_scoped_release unlocked;
    return std::make_unique<StreamLoader>(comm_ref(comm), source, options, state.get());
}

}  // namespace

void bind_streams(py::module_& m) {
    py::class_<StreamSource, std::unique_ptr<StreamSource>>(m, "StreamSource")
        .def_property_readonly("fields",
                               [](const StreamSource& s) { return fields_to_python(s.fields()); })
        .def_property_readonly("num_streams", &StreamSource::num_streams)
        .def_property_readonly("fingerprint", &StreamSource::fingerprint);
    m.def("python_stream_source", &python_stream_source, py::arg("fields"), py::arg("num_streams"),
          py::arg("make"), py::arg("fingerprint"), py::arg("weights"));
    m.def("sqlite_source", &sqlite_source, py::arg("comm"), py::arg("path"), py::arg("query"),
          py::arg("key_column"), py::arg("range_column"), py::arg("range_streams"),
          py::arg("nulls"), py::arg("fill_value"));

    py::class_<StreamLoader, std::unique_ptr<StreamLoader>>(m, "StreamLoader")
        .def(py::init(&make_stream_loader), py::arg("comm"), py::arg("source"), py::arg("options"),
             py::arg("resume_json"), py::keep_alive<1, 3>())
        .def("epoch",
             [](StreamLoader& l, std::uint64_t e) {
                 settle();
                 py::gil_scoped_release unlocked;
                 l.epoch(e);
             })
        // Interruptible by Ctrl-C while it waits for a stream or for peers (interruptible.hpp):
        // KeyboardInterrupt within about 50 ms; the interrupted step completes in the
        // background and its batch is the next call's, so a caught Ctrl-C loses no batch.
        .def("next",
             [](const py::object& self) -> py::object {
                 auto& l = self.cast<StreamLoader&>();
                 HostBatch batch;
                 const bool more = interruptible_next(
                     self, [&l](HostBatch& b) { return l.next(b); }, batch);
                 if (!more) throw py::stop_iteration();
                 return batch_to_python(std::move(batch));
             })
        .def("state_json",
             [](const StreamLoader& l) {
                 settle();
                 py::gil_scoped_release unlocked;
                 return l.state().to_json();
             })
        .def_property_readonly("steps", &StreamLoader::steps)
        .def_property_readonly("last_oversize", &StreamLoader::last_oversize)
        .def_property_readonly("stats",
                               [](const StreamLoader& l) { return stream_stats(l.stats()); })
        .def_property_readonly("rank", [](const StreamLoader& l) { return l.comm().rank(); })
        .def_property_readonly("world_size", [](const StreamLoader& l) { return l.comm().size(); });
}

}  // namespace mpistage::python
