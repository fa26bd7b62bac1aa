// Option structs from Python keyword arguments: one setter per field, named as the Python
// argument; an unknown name is a ConfigError naming it (never ignored), a value of the wrong
// Python type a TypeError naming the argument and the type it takes, a value the C++ side
// refuses a ConfigError prefixed with the argument (no pybind11 cast message reaches a user).
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "loader/stream/stream_config.hpp"
#include "plan/implied_sharding.hpp"

namespace mpistage::python {

namespace {

template <class Options>
using Setters = std::map<std::string, std::function<void(Options&, const py::handle&)>>;

/// What a value of the wrong type was, for messages: "str 'x'", "float 2.5".
std::string described(const py::handle& v) {
    std::string text = py::str(py::repr(v));
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return std::string(py::str(py::type::handle_of(v).attr("__name__"))) + " " + text;
}

[[noreturn]] void wrong_type(const py::handle& v, const char* takes) {
    throw py::type_error(std::string("takes ") + takes + ", got " + described(v));
}

std::uint64_t count(const py::handle& v) {
    // bool is an int in Python; batch_size=True is a mistake, not 1.
    if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v)) {
        wrong_type(v, "an int >= 0");
    }
    const auto n = v.cast<long long>();
    if (n < 0) throw ConfigError("must be >= 0, got " + std::to_string(n));
    return static_cast<std::uint64_t>(n);
}

bool flag(const py::handle& v) {
    if (!py::isinstance<py::bool_>(v) &&
        std::string(py::str(py::type::handle_of(v).attr("__name__"))) != "bool_") {
        wrong_type(v, "a bool");
    }
    return v.cast<bool>();
}

std::string text(const py::handle& v) {
    if (!py::isinstance<py::str>(v)) wrong_type(v, "a str");
    return v.cast<std::string>();
}

std::chrono::seconds seconds(const py::handle& v) {
    if (py::isinstance<py::bool_>(v) ||
        !(py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v))) {
        wrong_type(v, "seconds (an int or float >= 0)");
    }
    const double s = v.cast<double>();
    if (s < 0) throw ConfigError("must be >= 0 seconds, got " + std::to_string(s));
    return std::chrono::seconds(static_cast<std::int64_t>(s));
}

// shuffle=True is the CLI's default shuffle of the whole dataset each epoch ("global", like
// DistributedSampler(shuffle=True)); shuffle=False is "none".
Shuffle shuffle_of(const py::handle& v) {
    if (py::isinstance<py::bool_>(v)) return flag(v) ? Shuffle::global : Shuffle::none;
    if (!py::isinstance<py::str>(v)) wrong_type(v, "a bool or 'none', 'local', 'global'");
    return parse_shuffle(v.cast<std::string>());
}

StreamSharding parse_stream_sharding(const std::string& s) {
    if (s == "chunk") return StreamSharding::chunk;
    if (s == "hash") return StreamSharding::hash;
    if (s == "source") return StreamSharding::source;
    throw ConfigError("stream sharding '" + s + "' is not one of chunk, hash, source");
}

std::vector<std::uint64_t> counts(const py::handle& v) {
    if (py::isinstance<py::str>(v) || !py::isinstance<py::sequence>(v)) {
        wrong_type(v, "a list of ints >= 0");
    }
    std::vector<std::uint64_t> out;
    for (const py::handle& x : py::reinterpret_borrow<py::sequence>(v)) out.push_back(count(x));
    return out;
}

const Setters<LoaderOptions>& loader_setters() {
    using O = LoaderOptions;
    using V = const py::handle&;
    static const Setters<O> s{
        {"batch_size", [](O& o, V v) { o.plan.batch_size = count(v); }},
        {"seed", [](O& o, V v) { o.plan.seed = count(v); }},
        {"sharding", [](O& o, V v) { o.plan.sharding = parse_sharding(text(v)); }},
        {"shuffle", [](O& o, V v) { o.plan.shuffle = shuffle_of(v); }},
        {"remainder", [](O& o, V v) { o.plan.remainder = parse_remainder(text(v)); }},
        {"balance_steps", [](O& o, V v) { o.plan.balance_steps = flag(v); }},
        {"chunk_samples", [](O& o, V v) { o.plan.chunk_samples = count(v); }},
        {"window_chunks", [](O& o, V v) { o.plan.window_chunks = count(v); }},
        {"batch_bytes", [](O& o, V v) { o.plan.budget.batch_bytes = count(v); }},
        {"batch_tokens", [](O& o, V v) { o.plan.budget.batch_tokens = count(v); }},
        {"max_batch_samples", [](O& o, V v) { o.plan.budget.max_batch_samples = count(v); }},
        {"bucket_window", [](O& o, V v) { o.plan.budget.bucket_window = count(v); }},
        {"token_field", [](O& o, V v) { o.plan.budget.token_field = count(v); }},
        {"prefetch", [](O& o, V v) { o.pipeline.prefetch = count(v); }},
        {"io_threads", [](O& o, V v) { o.pipeline.io_threads = count(v); }},
        {"device", [](O& o, V v) { o.delivery.device = text(v); }},
        {"log_device_fallback", [](O& o, V v) { o.delivery.log_device_fallback = flag(v); }},
        {"pin_memory", [](O& o, V v) { o.delivery.pin_memory = flag(v); }},
        {"non_blocking", [](O& o, V v) { o.delivery.non_blocking = flag(v); }},
        {"timeout", [](O& o, V v) { o.safety.timeout = seconds(v); }},
        {"verify_files", [](O& o, V v) { o.safety.verify_files = flag(v); }},
        {"accept_legacy_state", [](O& o, V v) { o.safety.accept_legacy_state = flag(v); }},
        {"fingerprint", [](O& o, V v) { o.safety.fingerprint = parse_fingerprint_level(text(v)); }},
        {"stage", [](O& o, V v) { o.tier.stage = parse_stage(text(v)); }},
        {"stage_budget_bytes", [](O& o, V v) { o.tier.stage_budget_bytes = count(v); }},
        {"stage_ranks_per_node",
         [](O& o, V v) { o.tier.stage_ranks_per_node = static_cast<int>(count(v)); }},
        {"stage_read", [](O& o, V v) { o.tier.stage_read = parse_stage_read(text(v)); }},
        {"two_phase",
         [](O& o, V v) {
             // A ConfigError, as documented since two_phase existed (a bool included).
             if (!py::isinstance<py::str>(v)) {
                 throw ConfigError("takes 'off', 'on' or 'auto' (a str), got " + described(v));
             }
             o.pipeline.two_phase = parse_two_phase(v.cast<std::string>());
         }},
        // StreamPlanOptions (a loader over a StreamSource; the Python Loader passes its
        // sharding= and remainder= as stream_sharding= and stream_remainder=).
        {"stream_sharding", [](O& o, V v) { o.stream.sharding = parse_stream_sharding(text(v)); }},
        {"chunk_size", [](O& o, V v) { o.stream.chunk_size = count(v); }},
        {"hash_reading",
         [](O& o, V v) {
             const auto r = text(v);
             for (HashReading h : {HashReading::chunks, HashReading::sources, HashReading::keys,
                                   HashReading::automatic}) {
                 if (r == detail::hash_reading_name(h)) {
                     o.stream.hash_reading = h;
                     return;
                 }
             }
             throw ConfigError("hash_reading '" + r +
                               "' is not one of chunks, sources, keys, auto");
         }},
        {"stream_remainder",
         [](O& o, V v) {
             const auto r = text(v);
             if (r != "rebalance" && r != "mask") {
                 throw ConfigError("stream remainder '" + r + "' is not one of rebalance, mask");
             }
             o.stream.remainder = r == "mask" ? StreamRemainder::mask : StreamRemainder::rebalance;
         }},
        {"length_buckets", [](O& o, V v) { o.stream.length_buckets = counts(v); }},
        {"window_steps", [](O& o, V v) { o.stream.window_steps = count(v); }},
        {"window_bytes", [](O& o, V v) { o.stream.window_bytes = count(v); }},
    };
    return s;
}

// The C++ validation names fields as C++ does ("plan: batch_size must be ..."); the message is
// kept and the Python call named in front, so the argument is found either way.
template <class Options>
Options from_kwargs(const Setters<Options>& setters, const py::dict& kwargs, const char* what) {
    Options o;
    for (const auto& [key, value] : kwargs) {
        const auto name = py::cast<std::string>(key);
        const auto it = setters.find(name);
        if (it == setters.end()) {
            throw ConfigError(std::string("python: unknown ") + what + " option '" + name + "'");
        }
        if (value.is_none()) continue;
        const std::string where = std::string("mpistage.") + what + ": " + name + "=";
        try {
            it->second(o, value);
        } catch (const py::type_error& e) {
            throw py::type_error(where + " " + e.what());
        } catch (const ConfigError& e) {
            throw ConfigError(where + " " + e.what());
        }
    }
    return o;
}

LoaderOptions loader_options(const py::kwargs& kw) {
    LoaderOptions o = from_kwargs(loader_setters(), kw, "Loader");
    // shuffle="global" alone implies sharding="global", as the CLI's --shuffle global does.
    o.plan.sharding = parse_sharding(detail::implied_sharding(
        to_string(o.plan.shuffle), kw.contains("sharding") && !kw["sharding"].is_none(),
        to_string(o.plan.sharding)));
    o.validate();
    return o;
}

}  // namespace

void bind_options(py::module_& m) {
    py::class_<LoaderOptions>(m, "LoaderOptions")
        .def(py::init(&loader_options),
             "Local: LoaderOptions from keyword arguments named as the C++ fields "
             "(plan fields flattened: batch_size, seed, sharding, ...). @throws ConfigError.");
}

}  // namespace mpistage::python
