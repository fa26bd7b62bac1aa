"""Sources of samples by id and the Loader (mpistage::open_source, mpistage::Loader)."""
import json

from mpi4py import MPI

from . import _lifetime
from . import _mpistage as _core
from .batch import _torch_module, make_batch


def _handle(comm):
    """The Fortran handle of an mpi4py communicator (COMM_WORLD when None)."""
    return (MPI.COMM_WORLD if comm is None else comm).py2f()


def _paths(paths):
    return [str(paths)] if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__") \
        else [str(p) for p in paths]


class Source(_lifetime.Tracked):
    """Files opened as one dataset of samples addressed by id (HDF5, IDX, TFRecord/Example).

    ``fields``: list of dicts (name, dtype, shape, sample_bytes, ragged); ``num_samples``: N.
    Created by ``open_source``; must outlive the loaders reading it (they keep a reference).
    """

    def __init__(self, core):
        self._core = core
        self._track()

    @property
    def fields(self):
        return self._core.fields

    @property
    def num_samples(self):
        return self._core.num_samples

    @property
    def notes(self):
        """What the source decided on its own, one sentence each (``Source::notes``): e.g. the
        HDF5 datasets left out of the default field list, and why. The same on every rank."""
        return self._core.notes



def open_source(paths, *, format="auto", fields=(), index=(), on_corrupt="error", features=(),
                comm=None):
    """Collective over ``comm``: opens ``paths`` (one HDF5 file; IDX files, one field each;
    TFRecord files) as a Source.

    Args:
        format: "auto" (from the first path), "hdf5", "idx" or "tfrecord".
        fields: HDF5 dataset names to read (all aligned on dimension 0); empty: every one.
        index: DALI index files of the TFRecord files (optional, validated against the data).
        on_corrupt: "error" or "skip" (TFRecord records whose framing or CRC is bad).
        features: tf.train.Example features as the CLI writes them, e.g.
            ["image:bytes/uint8:28x28", "label:int64"]; empty: raw TFRecord payloads.
    Raises:
        ConfigError, IoError, FormatError, Hdf5Error: identical on every rank, naming the file.
    """
    core = _core.open_source(_handle(comm), _paths(paths), format, list(fields), list(index),
                             on_corrupt, list(features))
    return Source(core)


class Epoch(_lifetime.Tracked):
    """The batches of one epoch (``Loader.epoch``): an iterator of ``Batch``.

    Every ``next`` is collective (all ranks iterate the epoch to the same step; ``len`` is the
    number of steps, equal on every rank, decided before the first batch). The GIL is released
    while it waits for data or for peers. ``request_stop()`` ends it at the same step on every
    rank (agreed); ``stopped`` tells whether that happened.
    """

    def __init__(self, loader, core):
        self._loader = loader
        self._core = core
        self._track()

    def __iter__(self):
        return self

    def __next__(self):
        return make_batch(self._core.next(), self._loader._names, self._loader._tensors,
                          self._loader._dtypes)

    def __len__(self):
        return self._core.steps

    @property
    def steps(self):
        return self._core.steps

    @property
    def totals(self):
        return self._core.totals

    @property
    def stopped(self):
        return self._core.stopped

    def request_stop(self):
        self._core.request_stop()


class Loader(_lifetime.Tracked):
    """Stages the samples of a Source across the ranks of ``comm`` (mpistage::Loader).

    Construction is collective (options, N and the files are compared across ranks; ranks that
    differ all raise the same ConfigError). Keyword options are those of the C++
    ``LoaderOptions`` / ``PlanOptions`` / ``BatchBudget`` (docs/python.md lists them):
    batch_size, batch_bytes, batch_tokens, max_batch_samples, bucket_window, token_field,
    seed, sharding ("byte_range" | "global"), shuffle ("none" | "local" | "global"),
    remainder ("drop" | "pad" | "mask"), balance_steps, prefetch, io_threads, device
    ("auto" | "cpu" | "cuda" | "cuda:N"), pin_memory, non_blocking, timeout (seconds),
    verify_files, accept_legacy_state, fingerprint ("sampled" | "full"), stage ("none" | "memory" | "auto"),
    stage_budget_bytes, stage_ranks_per_node, stage_read ("auto" | "map" | "copy"),
    two_phase ("off" | "on" | "auto"; ``stats``
    says whether "auto" chose it: ``two_phase``, ``two_phase_note``). ``prefetch`` defaults
    to 4 here (2 in C++): a ``for`` loop's variable holds the previous batch while the next
    is read.

    ``tensors``: "torch" (default; ``torch.Tensor`` views, no copy) or "numpy" (numpy views).
    With a CUDA device chosen (``device="cuda"``, or ``"auto"``, the default, on a GPU) the
    loader copies each batch from its pinned ring to the device on its own stream, ahead of
    the consumer, and the fields are CUDA tensors over that memory (DLPack, no further copy;
    see ``Batch``). ``tensors="numpy"``, and a torch built without CUDA, stage on the CPU:
    "auto" means the CPU there, and "cuda" is refused. ``state``: a dict from ``state()`` of
    an earlier run (any world size with ``sharding="global"``): the loader continues where it
    stopped.
    Not thread-safe: one thread drives a loader.
    Raises: ConfigError, IoError, FormatError, MpiError; identical on every rank.
    """

    def __init__(self, source, *, comm=None, state=None, tensors="torch", **options):
        if tensors not in ("torch", "numpy"):
            raise _core.ConfigError(f"tensors '{tensors}' is not one of torch, numpy")
        # The loop variable of `for batch in ...` still holds one batch while the next is
        # fetched, so Python reads one slot further ahead than C++ by default.
        options.setdefault("prefetch", 4)
        if tensors == "numpy":  # numpy arrays are host memory
            device = options.setdefault("device", "cpu")
            if device not in ("cpu", "auto"):
                raise _core.ConfigError(
                    f"device '{device}' with tensors='numpy': numpy arrays are host memory; "
                    "use tensors='torch' for batches on a CUDA device, or device='cpu'")
            options["device"] = "cpu"
        elif not _torch_module().cuda.is_available():  # a CPU-only torch takes no CUDA tensor
            device = options.setdefault("device", "auto")
            if device == "auto":
                options["device"] = "cpu"
            elif device != "cpu":
                raise _core.ConfigError(
                    f"device '{device}': this torch ({_torch_module().__version__}) has no CUDA, "
                    "so it cannot take batches on a CUDA device; use device='cpu' or 'auto'")
        core_options = _core.LoaderOptions(**options)
        self._source = source
        self._tensors = tensors
        self._names = [f["name"] for f in source.fields]
        self._dtypes = [f["dtype"] for f in source.fields]
        if state is None:
            self._core = _core.Loader(_handle(comm), source._core, core_options)
        else:
            self._core = _core.Loader.restore(_handle(comm), source._core, core_options,
                                              json.dumps(state))
        if tensors == "torch":
            _torch_module()  # imported here, not inside the first epoch
        self._track()

    @classmethod
    def restore(cls, source, state, **kwargs):
        """Collective: a loader that continues where ``state`` (a dict) left off."""
        return cls(source, state=state, **kwargs)

    def epoch(self, epoch, *, max_steps=0):
        """Collective: starts epoch ``epoch`` (an argument, never hidden state); returns an
        ``Epoch``. ``max_steps`` > 0 ends it after that many steps on every rank."""
        return Epoch(self, self._core.epoch(epoch, max_steps))

    def state(self):
        """Not collective, identical on every rank: where the job stands, as a plain dict
        (JSON-serialisable). Counts the batches returned so far."""
        return json.loads(self._core.state_json())

    def close(self):
        """Collective: checks every rank left its last epoch at the same step (ConfigError
        otherwise, on every rank), then releases the C++ loader (its communicator, ring and
        memory tier). Python's cyclic garbage collector runs at different times on different
        ranks, so a loader caught in a reference cycle is released only here or at exit."""
        core = self.__dict__.get("_core")
        if core is not None:
            core.close()
            self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
        else:
            self._release()

    @property
    def stats(self):
        """This rank's counters (dict; times in seconds)."""
        return self._core.stats

    @property
    def totals(self):
        return self._core.totals

    @property
    def num_samples(self):
        return self._core.num_samples

    @property
    def rank(self):
        return self._core.rank

    @property
    def world_size(self):
        return self._core.world_size

    @property
    def field_names(self):
        return list(self._names)



