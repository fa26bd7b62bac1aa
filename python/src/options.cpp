// Option structs from Python keyword arguments: one setter per field, named as the C++ field;
// an unknown name is a ConfigError naming it (never ignored).
#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "bindings.hpp"

namespace mpistage::python {

namespace {

template <class Options>
using Setters = std::map<std::string, std::function<void(Options&, const py::handle&)>>;

std::uint64_t count(const py::handle& v) {
    const auto n = v.cast<long long>();
    if (n < 0) throw ConfigError("python: option value " + std::to_string(n) + " is negative");
    return static_cast<std::uint64_t>(n);
}

std::chrono::seconds seconds(const py::handle& v) {
    return std::chrono::seconds(static_cast<std::int64_t>(v.cast<double>()));
}

const Setters<LoaderOptions>& loader_setters() {
    using O = LoaderOptions;
    using V = const py::handle&;
    static const Setters<O> s{
        {"batch_size", [](O& o, V v) { o.plan.batch_size = count(v); }},
        {"seed", [](O& o, V v) { o.plan.seed = count(v); }},
        {"sharding", [](O& o, V v) { o.plan.sharding = parse_sharding(v.cast<std::string>()); }},
        {"shuffle", [](O& o, V v) { o.plan.shuffle = parse_shuffle(v.cast<std::string>()); }},
        {"remainder", [](O& o, V v) { o.plan.remainder = parse_remainder(v.cast<std::string>()); }},
        {"balance_steps", [](O& o, V v) { o.plan.balance_steps = v.cast<bool>(); }},
        {"batch_bytes", [](O& o, V v) { o.plan.budget.batch_bytes = count(v); }},
        {"batch_tokens", [](O& o, V v) { o.plan.budget.batch_tokens = count(v); }},
        {"max_batch_samples", [](O& o, V v) { o.plan.budget.max_batch_samples = count(v); }},
        {"bucket_window", [](O& o, V v) { o.plan.budget.bucket_window = count(v); }},
        {"token_field", [](O& o, V v) { o.plan.budget.token_field = count(v); }},
        {"prefetch", [](O& o, V v) { o.prefetch = count(v); }},
        {"io_threads", [](O& o, V v) { o.io_threads = count(v); }},
        {"device", [](O& o, V v) { o.device = v.cast<std::string>(); }},
        {"log_device_fallback", [](O& o, V v) { o.log_device_fallback = v.cast<bool>(); }},
        {"pin_memory", [](O& o, V v) { o.pin_memory = v.cast<bool>(); }},
        {"non_blocking", [](O& o, V v) { o.non_blocking = v.cast<bool>(); }},
        {"timeout", [](O& o, V v) { o.timeout = seconds(v); }},
        {"verify_files", [](O& o, V v) { o.verify_files = v.cast<bool>(); }},
        {"accept_legacy_state", [](O& o, V v) { o.accept_legacy_state = v.cast<bool>(); }},
        {"fingerprint",
         [](O& o, V v) { o.fingerprint = parse_fingerprint_level(v.cast<std::string>()); }},
        {"stage", [](O& o, V v) { o.stage = parse_stage(v.cast<std::string>()); }},
        {"stage_budget_bytes", [](O& o, V v) { o.stage_budget_bytes = count(v); }},
        {"stage_ranks_per_node", [](O& o, V v) { o.stage_ranks_per_node = v.cast<int>(); }},
        {"stage_read", [](O& o, V v) { o.stage_read = parse_stage_read(v.cast<std::string>()); }},
        {"two_phase",
         [](O& o, V v) {
             if (!py::isinstance<py::str>(v)) {
                 throw ConfigError("python: two_phase takes 'off', 'on' or 'auto' (a string)");
             }
             o.two_phase = parse_two_phase(v.cast<std::string>());
         }},
    };
    return s;
}

StreamSharding parse_stream_sharding(const std::string& s) {
    if (s == "chunk") return StreamSharding::chunk;
    if (s == "hash") return StreamSharding::hash;
    if (s == "source") return StreamSharding::source;
    throw ConfigError("stream sharding '" + s + "' is not one of chunk, hash, source");
}

const Setters<StreamOptions>& stream_setters() {
    using O = StreamOptions;
    using V = const py::handle&;
    static const Setters<O> s{
        {"sharding", [](O& o, V v) { o.sharding = parse_stream_sharding(v.cast<std::string>()); }},
        {"chunk_size", [](O& o, V v) { o.chunk_size = count(v); }},
        {"hash_reading",
         [](O& o, V v) {
             const auto r = v.cast<std::string>();
             if (r != "chunks" && r != "sources") {
                 throw ConfigError("hash_reading '" + r + "' is not one of chunks, sources");
             }
             o.hash_reading = r == "chunks" ? HashReading::chunks : HashReading::sources;
         }},
        {"remainder",
         [](O& o, V v) {
             const auto r = v.cast<std::string>();
             if (r != "rebalance" && r != "mask") {
                 throw ConfigError("stream remainder '" + r + "' is not one of rebalance, mask");
             }
             o.remainder = r == "mask" ? StreamRemainder::mask : StreamRemainder::rebalance;
         }},
        {"batch_size", [](O& o, V v) { o.batch_size = count(v); }},
        {"batch_bytes", [](O& o, V v) { o.batch_bytes = count(v); }},
        {"batch_tokens", [](O& o, V v) { o.batch_tokens = count(v); }},
        {"token_field", [](O& o, V v) { o.token_field = count(v); }},
        {"length_buckets",
         [](O& o, V v) { o.length_buckets = v.cast<std::vector<std::uint64_t>>(); }},
        {"timeout", [](O& o, V v) { o.timeout = seconds(v); }},
    };
    return s;
}

template <class Options>
Options from_kwargs(const Setters<Options>& setters, const py::dict& kwargs, const char* what) {
    Options o;
    for (const auto& [key, value] : kwargs) {
        const auto name = py::cast<std::string>(key);
        const auto it = setters.find(name);
        if (it == setters.end()) {
            throw ConfigError(std::string("python: unknown ") + what + " option '" + name + "'");
        }
        if (!value.is_none()) it->second(o, value);
    }
    o.validate();
    return o;
}

}  // namespace

void bind_options(py::module_& m) {
    py::class_<LoaderOptions>(m, "LoaderOptions")
        .def(py::init(
                 [](const py::kwargs& kw) { return from_kwargs(loader_setters(), kw, "loader"); }),
             "Local: LoaderOptions from keyword arguments named as the C++ fields "
             "(plan fields flattened: batch_size, seed, sharding, ...). @throws ConfigError.");
    py::class_<StreamOptions>(m, "StreamOptions")
        .def(py::init(
                 [](const py::kwargs& kw) { return from_kwargs(stream_setters(), kw, "stream"); }),
             "Local: StreamOptions from keyword arguments. @throws ConfigError.")
        .def("describe", &StreamOptions::describe);
}

}  // namespace mpistage::python
