// Stream sources from Python: a user's Python iterables as a CallableStreamSource (the Loader's
// stream planner does the sharding, batching and end-of-stream agreement) and the SQLite source.
// Python code runs only inside the generators, under the GIL; the loader's waits release it.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"

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
}

}  // namespace mpistage::python
