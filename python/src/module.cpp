// The `mpistage._mpistage` extension module: errors, the communicator hand-off and the batch
// hand-off shared by the loader and stream bindings. The Python package `mpistage` wraps it.
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "interruptible.hpp"
#include "mpistage/dlpack.hpp"

namespace mpistage::python {

CommRef comm_ref(std::int64_t fortran_handle, std::chrono::seconds timeout) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        throw MpiError("python: MPI is not initialised; import mpi4py.MPI before using mpistage");
    }
    const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_handle));
    if (comm == MPI_COMM_NULL) throw ConfigError("python: the communicator is MPI_COMM_NULL");
    check_timeout(timeout, "python: timeout=");
    return CommRef(comm, timeout);
}

Communicator communicator(std::int64_t fortran_handle, std::chrono::seconds timeout) {
    const CommRef ref = comm_ref(fortran_handle, timeout);
    return ref.duplicate();
}

py::dtype numpy_dtype(DType dtype) {
    switch (dtype) {
        case DType::uint8:
            return py::dtype::of<std::uint8_t>();
        case DType::int8:
            return py::dtype::of<std::int8_t>();
        case DType::uint16:
            return py::dtype::of<std::uint16_t>();
        case DType::int16:
            return py::dtype::of<std::int16_t>();
        case DType::uint32:
            return py::dtype::of<std::uint32_t>();
        case DType::int32:
            return py::dtype::of<std::int32_t>();
        case DType::uint64:
            return py::dtype::of<std::uint64_t>();
        case DType::int64:
            return py::dtype::of<std::int64_t>();
        case DType::float32:
            return py::dtype::of<float>();
        case DType::float64:
            return py::dtype::of<double>();
        case DType::boolean:
            return py::dtype("bool");
    }
    throw ConfigError("python: unknown dtype");
}

namespace {

// One field of `batch` as a numpy array over the batch's memory, kept alive by `owner`.
py::array field_array(const HostBatch& batch, const HostField& f, const py::capsule& owner) {
    const py::dtype dt = numpy_dtype(f.info->dtype);
    const auto elem = static_cast<py::ssize_t>(dtype_size(f.info->dtype));
    if (f.info->ragged) {
        const py::ssize_t count = static_cast<py::ssize_t>(f.size_bytes) / elem;
        return py::array(dt, {count}, {elem}, f.data, owner);
    }
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(batch.size())};
    for (std::int64_t d : f.info->sample_shape) shape.push_back(static_cast<py::ssize_t>(d));
    std::vector<py::ssize_t> strides(shape.size(), elem);
    for (std::size_t i = shape.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * shape[i];
    return py::array(dt, shape, strides, f.data, owner);
}

// Part `name` of a CUDA batch as a DLPack capsule: named "dltensor" (the protocol of
// torch.utils.dlpack.from_dlpack, CuPy and JAX), which a consumer renames "used_dltensor" and
// then owns; a capsule never consumed calls the tensor's deleter when it is collected (the
// deleter makes no Python call and no blocking CUDA call: it returns the device block to the
// loader's pool, fenced on the consumer's stream).
py::object dlpack_capsule(const HostBatch& batch, const std::string& name) {
    dlpack::DLManagedTensor* t = to_dlpack(batch, name);
    // Read by every torch since 1.10 (DLPack 0.6); make_batch views booleans as bool again.
    (void)to_legacy_dtypes(t);
    PyObject* capsule = PyCapsule_New(t, "dltensor", [](PyObject* c) {
        if (!PyCapsule_IsValid(c, "dltensor")) return;  // consumed
        auto* m = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
        if (m && m->deleter) m->deleter(m);
    });
    if (!capsule) {
        t->deleter(t);
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(capsule);
}

// One field of a CUDA batch as Python sees it: a DLPack producer (the Python specification of
// DLPack, https://dmlc.github.io/dlpack/latest/python_spec.html: `__dlpack__(stream=)` and
// `__dlpack_device__()`), so `torch.from_dlpack`, CuPy and JAX order their stream after the
// batch's copy and the batch's device block is fenced on that stream. Holds the batch (shared
// with the other fields of the same batch).
struct DeviceField {
    std::shared_ptr<const HostBatch> batch;
    std::string name;
};

// The stream a DLPack consumer names (the specification's CUDA values): None is the legacy
// default stream, 1 the legacy default stream, 2 the per-thread default stream, any other
// positive value a cudaStream_t; -1 asks for no synchronisation (nullopt); 0 is refused.
std::optional<void*> dlpack_stream(const py::object& stream) {
    if (stream.is_none()) return nullptr;
    if (!py::isinstance<py::int_>(stream) || py::isinstance<py::bool_>(stream)) {
        throw py::type_error(
            "__dlpack__(stream=): an int (a cudaStream_t, 1: legacy default, "
            "2: per-thread default, -1: no synchronisation) or None, got " +
            std::string(py::str(py::type::of(stream).attr("__name__"))));
    }
    const auto value = stream.cast<long long>();
    if (value == -1) return std::nullopt;
    if (value == 0 || value < -1) {
        throw py::value_error("__dlpack__(stream=" + std::to_string(value) +
                              "): 0 and negative values other than -1 are not CUDA streams in "
                              "DLPack (1 is the legacy default stream)");
    }
    if (value == 1) return nullptr;
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(value));
}

}  // namespace

void bind_batch(py::module_& m) {
    py::class_<DeviceField>(m, "DeviceField",
                            "One field of a CUDA batch: a DLPack producer over the loader's device "
                            "block (no copy). Thread-safe.")
        .def(
            "__dlpack__",
            [](const DeviceField& f, const py::object& stream) {
                if (const std::optional<void*> s = dlpack_stream(stream)) {
                    use_on_stream(*f.batch, *s);  // waits for the copy on s, fences the block
                }
                return dlpack_capsule(*f.batch, f.name);
            },
            py::arg("stream") = py::none(),
            "A DLPack capsule of the field (device memory, DLPack 0.6 types), after making "
            "`stream` wait for the batch's copy and fencing the batch's device block on it "
            "(`mpistage::use_on_stream`). Each call gives a new capsule over the same memory. "
            "Raises CudaError, TypeError / ValueError for a stream DLPack does not define.")
        .def(
            "__dlpack_device__",
            [](const DeviceField& f) { return py::make_tuple(2, f.batch->device()); },
            "(2, ordinal): kDLCUDA and the batch's device.")
        .def(
            "use_on_stream",
            [](const DeviceField& f, const py::object& stream) {
                if (const std::optional<void*> s = dlpack_stream(stream)) {
                    use_on_stream(*f.batch, *s);
                }
            },
            py::arg("stream"),
            "Makes `stream` (as __dlpack__ takes it) wait for the batch's copy and fences the "
            "batch's device block on it, as torch's Tensor.record_stream (the whole batch, every "
            "field). Not collective. Raises CudaError.");
}

py::tuple batch_to_python(HostBatch&& batch) {
    auto* owned = new HostBatch(std::move(batch));
    py::capsule owner(owned, [](void* p) { delete static_cast<HostBatch*>(p); });
    const auto size = static_cast<py::ssize_t>(owned->size());
    // On a CUDA batch these are the host copies of index, valid and ragged offsets.
    py::array index(py::dtype::of<std::int64_t>(), {size}, {py::ssize_t{8}}, owned->index(), owner);
    py::array valid(py::dtype("bool"), {size}, {py::ssize_t{1}}, owned->valid(), owner);
    const bool on_device = owned->device() >= 0;
    std::shared_ptr<const HostBatch> shared;
    if (on_device) shared = std::make_shared<const HostBatch>(*owned);
    py::list fields;
    py::list offsets;
    for (const HostField& f : owned->fields()) {
        if (on_device) {
            fields.append(py::cast(DeviceField{shared, f.info->name}));
        } else {
            fields.append(field_array(*owned, f, owner));
        }
        if (f.info->ragged) {
            offsets.append(py::array(py::dtype::of<std::int64_t>(), {size + 1}, {py::ssize_t{8}},
                                     f.offsets, owner));
        } else {
            offsets.append(py::none());
        }
    }
    return py::make_tuple(owned->epoch(), owned->step(), owned->num_valid(), index, valid, fields,
                          offsets, owned->device());
}

py::list fields_to_python(const std::vector<FieldInfo>& fields) {
    py::list out;
    for (const FieldInfo& f : fields) {
        py::dict d;
        d["name"] = f.name;
        d["dtype"] = dtype_name(f.dtype);
        d["shape"] = py::tuple(py::cast(f.sample_shape));
        d["sample_bytes"] = f.sample_bytes;
        d["ragged"] = f.ragged;
        out.append(d);
    }
    return out;
}

std::string python_names(const std::string& message) {
    // C++ option fields as the Python arguments that set them; CLI flags named beside a field
    // are dropped (a Python user has no flags).
    static const std::regex options(
        R"(\b(?:Loader|Plan|Epoch|Open|Sqlite)Options::(?:plan\.(?:budget\.)?|stream\.|pipeline\.|delivery\.|tier\.|safety\.)?([a-z_]+))");
    static const std::regex budget(R"(\bBatchBudget::([a-z_]+))");
    static const std::regex plan_field(
        R"(\b(?:plan\.(?:budget\.)?|stream\.|pipeline\.|delivery\.|tier\.|safety\.)([a-z_]+))");
    static const std::regex flag(R"( \(--[a-z0-9-]+\))");
    std::string out = std::regex_replace(message, options, "$1=");
    out = std::regex_replace(out, budget, "$1=");
    out = std::regex_replace(out, plan_field, "$1=");
    out = std::regex_replace(out, flag, "");
    const std::string stop = "EpochRange::request_stop";
    for (auto at = out.find(stop); at != std::string::npos; at = out.find(stop, at)) {
        out.replace(at, stop.size(), "Epoch.request_stop()");
    }
    return out;
}

void bind_errors(py::module_& m) {
    // The Python types; the translator below (registered last, so tried first) raises them
    // with the message in Python's names.
    auto& base = py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
    auto& config = py::register_exception<ConfigError>(m, "ConfigError", base.ptr());
    auto& io = py::register_exception<IoError>(m, "IoError", base.ptr());
    auto& format = py::register_exception<FormatError>(m, "FormatError", base.ptr());
    auto& mpi = py::register_exception<MpiError>(m, "MpiError", base.ptr());
    auto& hdf5 = py::register_exception<Hdf5Error>(m, "Hdf5Error", base.ptr());
    auto& cuda = py::register_exception<CudaError>(m, "CudaError", base.ptr());
    static PyObject* const types[] = {config.ptr(), io.ptr(),   format.ptr(), mpi.ptr(),
                                      hdf5.ptr(),   cuda.ptr(), base.ptr()};
    py::register_exception_translator([](std::exception_ptr p) {
        if (!p) return;
        auto raise = [](PyObject* type, const Error& e) {
            PyErr_SetString(type, python_names(e.what()).c_str());
        };
        try {
            std::rethrow_exception(p);
        } catch (const ConfigError& e) {
            raise(types[0], e);
        } catch (const IoError& e) {
            raise(types[1], e);
        } catch (const FormatError& e) {
            raise(types[2], e);
        } catch (const MpiError& e) {
            raise(types[3], e);
        } catch (const Hdf5Error& e) {
            raise(types[4], e);
        } catch (const CudaError& e) {
            raise(types[5], e);
        } catch (const Error& e) {
            raise(types[6], e);
        }
    });
}

}  // namespace mpistage::python

PYBIND11_MODULE(_mpistage, m) {
    namespace mp = mpistage::python;
    m.doc() = "mpistage C++ core: sources, stream sources, the Loader (use the `mpistage` package)";
    m.attr("version") = MPISTAGE_VERSION;
    mp::init_interruptible();
    mp::bind_errors(m);
    mp::bind_batch(m);
    mp::bind_options(m);
    mp::bind_loader(m);
    mp::bind_streams(m);
    mp::bind_checks(m);
}
