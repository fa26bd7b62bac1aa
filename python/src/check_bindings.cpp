// The CLI's exactly-once check (`mpistage stage --verify`, cli/verify.hpp) for epochs driven from
// Python: the same IdCount (ids counted by their owner rank, N/W bits a rank) and the same
// verdict (`verify_epoch`), so `Loader(verify=True)` and `--verify` agree on every epoch. And
// the CLI's shuffle-quality figure (cli/shuffle_quality.hpp) of an epoch, the same code.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/shuffle_quality.hpp"
#include "cli/stop_signals.hpp"
#include "cli/verify.hpp"
#include "comm/agree.hpp"
#include "interruptible.hpp"

namespace mpistage::python {

namespace {

// One epoch's check: `add` each batch as it is yielded (collective every `every` steps, the same
// step on every rank since every rank yields the same steps), `finish` after the last one.
class EpochCheck {
public:
    explicit EpochCheck(const Loader& loader)
        : comm_(loader.comm()), num_samples_(loader.num_samples()) {
        const PlanOptions& plan = loader.options().plan;
        every_ = cli::exchange_interval(plan.budget.active() ? plan.budget.max_batch_samples
                                                             : plan.batch_size);
        py::gil_scoped_release unlocked;
        comm_.split_node();  // the bitmap is checked against the node's share (IdCount)
        run_agreed(comm_, [&] { count_.emplace(comm_, num_samples_, "the loader's source"); });
    }

    // Collective every `every` steps. `index` int64 [B], `valid` bool [B] of one batch.
    void add(const py::array_t<std::int64_t, py::array::c_style>& index,
             const py::array_t<bool, py::array::c_style>& valid) {
        const auto ids = index.unchecked<1>();
        const auto ok = valid.unchecked<1>();
        for (py::ssize_t j = 0; j < ids.shape(0); ++j) {
            if (ok(j)) count_->add(ids(j));
        }
        ++batches_;
        if (batches_ % every_ == 0) {
            py::gil_scoped_release unlocked;
            count_->exchange();
        }
    }

    // Collective: the verdict, identical on every rank. `partial`: the range ended before its
    // plan's end (max_steps, an agreed stop): only what was yielded is expected, once.
    py::dict finish(std::uint64_t epoch, const EpochRange& range, bool partial) {
        cli::EpochReport r;
        {
            py::gil_scoped_release unlocked;
            cli::Expectation x;
            x.num_samples = num_samples_;
            x.expected =
                partial ? comm_.allreduce_sum(count_->added()) : range.totals().valid_samples;
            r = cli::verify_epoch(comm_, epoch, *count_, batches_, x);
        }
        py::dict d;
        d["epoch"] = r.epoch;
        d["ok"] = r.ok;
        d["batches"] = r.batches;
        d["valid"] = r.valid;
        d["expected"] = r.expected;
        d["duplicates"] = r.duplicates;
        d["missing"] = r.missing;
        d["out_of_range"] = r.out_of_range;
        return d;
    }

private:
    const Communicator& comm_;
    std::uint64_t num_samples_ = 0;
    std::optional<cli::IdCount> count_;
    std::uint64_t every_ = 1;
    std::uint64_t batches_ = 0;
};

// One epoch's shuffle-quality figure: `add` each yielded batch (local), `finish` (collective).
class EpochShuffleQuality {
public:
    explicit EpochShuffleQuality(const Loader& loader)
        : comm_(loader.comm()),
          quality_(loader.num_samples(), loader.options().plan.shuffle == Shuffle::chunks
                                             ? loader.options().plan.chunk_samples
                                             : 0) {}
    // Local. `index` int64 [B], `valid` bool [B] of one batch.
    void add(const py::array_t<std::int64_t, py::array::c_style>& index,
             const py::array_t<bool, py::array::c_style>& valid) {
        if (index.ndim() != 1 || valid.ndim() != 1 || index.shape(0) != valid.shape(0)) {
            throw ConfigError("ShuffleQuality.add: index and valid must be 1-D of one length");
        }
        static_assert(sizeof(bool) == sizeof(std::uint8_t), "valid is read as bytes");
        quality_.add(index.data(), reinterpret_cast<const std::uint8_t*>(valid.data()),
                     static_cast<std::size_t>(index.shape(0)));
    }
    // Collective: the figure as a dict, identical on every rank (the JSON report's keys).
    py::dict finish() {
        cli::ShuffleFigure f;
        {
            py::gil_scoped_release unlocked;
            f = quality_.finish(comm_);
        }
        py::dict d;
        const nlohmann::json figure = cli::shuffle_figure_json(f);
        for (const auto& [key, value] : figure.items()) {
            if (value.is_number_float()) {
                d[py::str(key)] = value.get<double>();
            } else {
                d[py::str(key)] = value.get<std::uint64_t>();
            }
        }
        return d;
    }

private:
    const Communicator& comm_;
    cli::ShuffleQuality quality_;
};

}  // namespace

void bind_checks(py::module_& m) {
    py::class_<EpochShuffleQuality>(m, "ShuffleQuality")
        .def(py::init([](const Loader& loader) {
                 return std::make_unique<EpochShuffleQuality>(loader);
             }),
             py::arg("loader"), py::keep_alive<1, 2>(),
             "Local: the shuffle-quality figure of one epoch of `loader` (the JSON report's "
             "epochs[].shuffle_quality, docs/shuffle.md).")
        .def("add", &EpochShuffleQuality::add, py::arg("index"), py::arg("valid"),
             "Local: one yielded batch's ids (index int64 [B], valid bool [B]).")
        .def("finish", &EpochShuffleQuality::finish,
             "Collective: the figure as a dict (blocks, blocks_per_batch, "
             "full_shuffle_blocks_per_batch, mean_jump, full_shuffle_mean_jump, batches; "
             "with shuffle='chunks' also chunk_samples, chunks_per_batch, "
             "full_shuffle_chunks_per_batch), identical on every rank.");

    // `mpistage stage --stop-signals` (cli/stop_signals.hpp, mpistage/stop.hpp): the same parser
    // of signal names and the library's process-wide stop request every loader's agreement
    // carries.
    m.def(
        "install_stop_signals",
        [](std::int64_t comm, const std::string& list) {
            std::vector<int> signals;
            {
                const Communicator c = communicator(comm);
                py::gil_scoped_release unlocked;
                // As `stage` installs them: agreed, so a bad list fails on every rank.
                run_agreed(c, [&] {
                    signals = cli::parse_stop_signals(list);
                    install_stop_signals(signals);
                });
            }
            std::vector<std::string> names;
            for (int s : signals) names.push_back(cli::signal_name(s));
            return names;
        },
        py::arg("comm"), py::arg("signals"),
        "Collective over `comm`: --stop-signals' list (\"USR1,TERM\", \"none\") installed as stop "
        "handlers; "
        "returns their names. @throws ConfigError naming an entry that is not a catchable signal.");
    m.attr("EXIT_STOPPED") = cli::kExitStopped;
    m.def("request_stop", &request_stop, "Local, async-signal-safe: mpistage::request_stop().");
    m.def("stop_requested", &stop_requested, "Local: mpistage::stop_requested().");
    m.def(
        "stop_signal",
        []() -> py::object {
            const int s = stop_signal();
            if (s == 0) return py::none();
            return py::str(cli::signal_name(s));
        },
        "Local: the name of the signal that requested the stop (\"TERM\"), or None.");
    m.def("clear_stop_request", &clear_stop_request, "Local: mpistage::clear_stop_request().");

    // `mpistage convert idx` and `mpistage index`: the CLI's own commands (cli/commands.hpp), so
    // a Python job converts and indexes exactly as the CLI does, with the same errors.
    m.def(
        "convert_idx",
        [](std::int64_t comm, const std::string& images, const std::string& labels,
           const std::string& output, const std::string& format, std::uint64_t chunk_rows,
           int gzip_level) {
            const Communicator c = communicator(comm);
            cli::ConvertArgs a;
            a.images = images;
            a.labels = labels;
            a.output = output;
            a.format = format;
            a.chunk_rows = chunk_rows;
            a.gzip_level = gzip_level;
            py::gil_scoped_release unlocked;
            cli::run_convert(c, a);
        },
        py::arg("comm"), py::arg("images"), py::arg("labels"), py::arg("output"), py::arg("format"),
        py::arg("chunk_rows"), py::arg("gzip_level"),
        "Collective over `comm`: `mpistage convert idx` (rank 0 converts). @throws ConfigError, "
        "IoError, FormatError, Hdf5Error, identically on every rank.");
    m.def(
        "write_index",
        [](std::int64_t comm, const std::vector<std::string>& files,
           const std::vector<std::string>& outputs) {
            const Communicator c = communicator(comm);
            cli::IndexArgs a;
            a.files = files;
            a.outputs = outputs;
            py::gil_scoped_release unlocked;
            cli::run_index(c, a);
        },
        py::arg("comm"), py::arg("files"), py::arg("outputs"),
        "Collective over `comm`: `mpistage index` (DALI index files of TFRecord files, scanned "
        "in parallel; rank 0 writes). @throws ConfigError, IoError, FormatError, identically on "
        "every rank.");

    py::class_<EpochCheck>(m, "EpochCheck")
        .def(py::init([](const Loader& loader) {
                 settle();
                 return std::make_unique<EpochCheck>(loader);
             }),
             py::arg("loader"), py::keep_alive<1, 2>(),
             "Collective: the exactly-once check of one epoch of `loader` (mpistage stage "
             "--verify). @throws ConfigError when the id bitmap does not fit the node's memory.")
        .def("add", &EpochCheck::add, py::arg("index"), py::arg("valid"),
             "Collective every few steps: counts one yielded batch's valid ids.")
        .def("finish", &EpochCheck::finish, py::arg("epoch"), py::arg("range"), py::arg("partial"),
             "Collective: the verdict as a dict (ok, batches and valid per rank, expected, "
             "duplicates, missing, out_of_range), identical on every rank.");
}

}  // namespace mpistage::python
