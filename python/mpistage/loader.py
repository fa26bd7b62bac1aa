"""Sources of samples by id and the Loader (mpistage::open_source, mpistage::Loader)."""
import json
import logging
import warnings
import weakref

from mpi4py import MPI

from . import _lifetime
from . import _mpistage as _core
from .batch import _torch_module, make_batch, stream_handle


_log = logging.getLogger("mpistage")


def _handle(comm):
    """The Fortran handle of an mpi4py communicator (COMM_WORLD when None)."""
    if comm is None:
        return MPI.COMM_WORLD.py2f()
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm= takes an mpi4py.MPI.Comm (or None for COMM_WORLD), got "
                        f"{type(comm).__name__}")
    return comm.py2f()


def _count(value, name):
    """``value`` as an int >= 0; TypeError / ConfigError naming the argument ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        if type(value).__name__.startswith(("int", "uint")) and hasattr(value, "__index__"):
            value = int(value)  # numpy integers
        else:
            raise TypeError(f"{name}= takes an int >= 0, got {type(value).__name__} {value!r}")
    if value < 0:
        raise _core.ConfigError(f"{name}= must be >= 0, got {value}")
    return value


def _text_list(values, name):
    if isinstance(values, (str, bytes)):
        values = [values]
    try:
        out = [str(v) if hasattr(v, "__fspath__") else v for v in values]
    except TypeError:
        raise TypeError(f"{name}= takes a list of str, got {type(values).__name__}") from None
    for v in out:
        if not isinstance(v, str):
            raise TypeError(f"{name}= takes a list of str, got an item {type(v).__name__} {v!r}")
    return out


def _choice(value, name, allowed):
    if not isinstance(value, str):
        raise TypeError(f"{name}= takes one of {', '.join(allowed)} (a str), got "
                        f"{type(value).__name__} {value!r}")
    if value not in allowed:
        raise _core.ConfigError(f"{name}='{value}' is not one of {', '.join(allowed)}")
    return value


def _token_field(options, names):
    """``token_field=`` by name or by position in the source's fields."""
    field = options.get("token_field")
    if isinstance(field, str):
        if field not in names:
            raise _core.ConfigError(f"token_field='{field}' is not a field of the source "
                                    f"(fields: {', '.join(names)})")
        options["token_field"] = names.index(field)


def _paths(paths):
    return [str(paths)] if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__") \
        else [str(p) for p in paths]


class Source(_lifetime.Tracked):
    """Files opened as one dataset of samples addressed by id (HDF5, IDX, TFRecord/Example).

    ``fields``: list of dicts (name, dtype, shape, sample_bytes, ragged); ``num_samples``: N;
    ``paths``: the files. Created by ``open_source``; must outlive the loaders reading it (they
    keep a reference). ``close()`` (or ``with open_source(...) as source:``) closes the files.
    Not thread-safe.
    """

    def __init__(self, core, paths=()):
        self._core = core
        self._paths = list(paths)
        self._closed = False
        self._loaders = weakref.WeakSet()  # loaders built over this source (open or closed)
        self._track()

    @property
    def paths(self):
        """The files, as given to ``open_source``."""
        return list(self._paths)

    @property
    def closed(self):
        """Whether ``close()`` was called (the same on every rank)."""
        return self._closed

    def _name(self):
        shown = ", ".join(f"'{p}'" for p in self._paths[:3])
        more = len(self._paths) - 3
        return f"source {shown}" + (f" and {more} other file(s)" if more > 0 else "")

    def _check_open(self, what):
        """ConfigError naming the source when it was closed (identical on every rank: close()
        is collective)."""
        if self._closed:
            raise _core.ConfigError(f"{what}: {self._name()} was closed (Source.close()); "
                                    "open it again with open_source")

    def close(self):
        """Collective over the source's communicator (every rank calls it at the same point):
        closes the files (HDF5: the collective H5Fclose; TFRecord: the MPI files and the
        shared descriptor window; IDX: the descriptors). Safe to call twice. ``fields``,
        ``num_samples``, ``paths`` and ``notes`` stay valid; a ``Loader`` over the closed
        source, and any read of it, is a ConfigError naming the source.

        Raises:
            ConfigError: a loader reading this source is still open (``loader.close()``
                first); the same on every rank, the source left open.
        """
        if self._closed:
            return
        open_loaders = [l for l in self._loaders if "_core" in l.__dict__]
        if open_loaders:
            raise _core.ConfigError(
                f"Source.close(): {len(open_loaders)} loader(s) reading {self._name()} are "
                "still open; close them first (loader.close(), collective)")
        self._core.close()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()

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
                comm=None, timeout=300):
    """Collective over ``comm``: opens ``paths`` (one HDF5 file; IDX files, one field each;
    TFRecord files) as a Source.

    Args:
        format: "auto" (from the first path), "hdf5", "idx" or "tfrecord".
        fields: HDF5 dataset names to read (all aligned on dimension 0); empty: every one.
        index: DALI index files of the TFRecord files (optional, validated against the data).
        on_corrupt: "error" or "skip" (TFRecord records whose framing or CRC is bad).
        features: tf.train.Example features as the CLI writes them, e.g.
            ["image:bytes/uint8:28x28", "label:int64"]; empty: raw TFRecord payloads.
        timeout: whole seconds the open and the source's collective teardown (the last close
            of an HDF5 or MPI-IO file, when the Source is closed or released) wait for the
            other ranks before the watchdog ends the job (exit code 70); 0 = wait forever.
            Raise it when one rank may work long (a checkpoint) while the others release
            their sources.
    Raises:
        ConfigError, IoError, FormatError, Hdf5Error: identical on every rank, naming the file.
    """
    _choice(format, "format", ("auto", "hdf5", "idx", "tfrecord"))
    _choice(on_corrupt, "on_corrupt", ("error", "skip"))
    if not isinstance(paths, (str, bytes, list, tuple)) and not hasattr(paths, "__fspath__"):
        raise TypeError(f"paths= takes a path or a list of paths, got {type(paths).__name__}")
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        raise TypeError(f"timeout= takes whole seconds (an int), got {type(timeout).__name__}")
    core = _core.open_source(_handle(comm), _text_list(_paths(paths), "paths"), format,
                             _text_list(fields, "fields"), _text_list(index, "index"),
                             on_corrupt, _text_list(features, "features"), timeout)
    return Source(core, _paths(paths))


class Epoch(_lifetime.Tracked):
    """The batches of one epoch (``Loader.epoch``): an iterator of ``Batch``.

    Every ``next`` is collective (all ranks iterate the epoch to the same step; ``len`` is the
    number of steps, equal on every rank, decided before the first batch). The GIL is released
    while it waits for data or for peers, and Ctrl-C interrupts that wait: KeyboardInterrupt is
    raised within about 50 ms; the interrupted call completes in the background with the peers
    (its batch is the next ``next``'s), and the peers get the loader's agreed ConfigError at
    this rank's next loader call (``close()``, or exit). ``request_stop()`` ends it at the same
    step on every rank (agreed); ``stopped`` tells whether that happened.

    With ``verify`` (``Loader(verify=True)`` or ``epoch(e, verify=True)``) the epoch is checked
    exactly once as ``mpistage stage --verify`` checks it (the same code): every valid id
    yielded once over all ranks, equal batch counts; ``verified`` is then the verdict (a dict,
    identical on every rank: ok, batches and valid per rank, expected, duplicates, missing,
    out_of_range), and a failed check raises ``mpistage.Error`` on every rank at the end.

    With ``shuffle_quality`` (``Loader(shuffle_quality=True)`` or ``epoch(e,
    shuffle_quality=True)``) the epoch's shuffle-quality figure is measured on the ids it
    yields, as ``mpistage stage`` reports it (the same code; docs/shuffle.md, "How good a
    shuffle is"): ``shuffle_quality`` is then, after the last batch (a collective sum at
    ``StopIteration``), a dict identical on every rank with the JSON report's keys: blocks,
    blocks_per_batch and full_shuffle_blocks_per_batch (distinct blocks of N/256 ids per batch,
    and a full shuffle's expectation), mean_jump and full_shuffle_mean_jump (mean distance of
    consecutive ids over N), batches; with shuffle="chunks" also chunk_samples,
    chunks_per_batch and full_shuffle_chunks_per_batch. ``None`` before the end.
    """

    def __init__(self, loader, core, epoch=0, max_steps=0, verify=False, shuffle_quality=False):
        if loader._stream:
            from . import streams
            del streams._raised[:]
        self._loader = loader
        self._core = core
        self._epoch = epoch
        self._partial = core.steps < core.totals["steps"]  # max_steps ended it early
        self._check = _core.EpochCheck(loader._core) if verify else None
        self.verified = None
        self._quality = _core.ShuffleQuality(loader._core) if shuffle_quality else None
        self.shuffle_quality = None
        self._track()

    def __iter__(self):
        return self

    def __next__(self):
        loader = self._loader
        try:
            if loader._cuda_device is None:
                raw = self._core.next()
            else:  # ordered on the consumer's stream (torch's current one by default)
                raw = self._core.next(loader._core, loader._consumer_stream())
        except StopIteration:
            if self._quality is not None:  # before the check, which may raise
                quality, self._quality = self._quality, None
                self.shuffle_quality = quality.finish()
            if self._check is not None:
                self._finish_check()
            raise
        except _core.Error as agreed:
            if self._loader._stream:
                from . import streams
                if streams._raised:
                    # This rank's iterable raised: the agreed error (the same type and text
                    # on every rank) chained from that exception, which keeps its type and
                    # traceback here as __cause__ (``except mpistage.Error as e:
                    # e.__cause__``).
                    original = streams._raised.pop()
                    del streams._raised[:]
                    raise agreed from original
            raise
        if self._check is not None:
            self._check.add(raw[3], raw[4])
        if self._quality is not None:
            self._quality.add(raw[3], raw[4])
        return make_batch(raw, self._loader._names, self._loader._tensors,
                          self._loader._dtypes)

    def _finish_check(self):
        check, self._check = self._check, None
        report = check.finish(self._epoch, self._core, self._partial or self._core.stopped)
        self.verified = report
        if not report["ok"]:
            raise _core.Error(
                f"exactly-once check of epoch {report['epoch']} failed: batches per rank "
                f"{report['batches']}, {report['duplicates']} duplicate, {report['missing']} "
                f"missing, {report['out_of_range']} out-of-range ids of {report['expected']} "
                "expected")

    def __len__(self):
        if self._loader._stream and self._core.steps == 0:
            raise TypeError("len() of a stream epoch: its length is known only at its end "
                            "(give max_steps= for a fixed number of steps)")
        return self._core.steps

    @property
    def steps(self):
        """Steps of the epoch, decided before the first batch (a stream's: max_steps, or 0:
        unknown)."""
        return self._core.steps

    @property
    def steps_done(self):
        """Batches this epoch has yielded so far (equal on every rank between steps)."""
        return self._core.steps_done

    @property
    def last_oversize(self):
        """Whether the last batch is one sample over the byte or token budget."""
        return self._core.last_oversize

    @property
    def totals(self):
        return self._core.totals

    @property
    def stopped(self):
        return self._core.stopped

    def request_stop(self):
        self._core.request_stop()


class Loader(_lifetime.Tracked):
    """Stages the samples of a Source, or the items of a StreamSource, across the ranks of
    ``comm`` (mpistage::Loader: one loader, one Epoch, one state for both).

    Construction is collective (options, N and the files are compared across ranks; ranks that
    differ all raise the same ConfigError). Keyword options are those of the C++
    ``LoaderOptions`` / ``PlanOptions`` / ``BatchBudget`` (docs/python.md lists them):
    batch_size, batch_bytes, batch_tokens, max_batch_samples, bucket_window, token_field,
    seed, sharding ("byte_range" | "global"), shuffle ("none" | "local" | "global" |
    "chunks"; True means "global", False "none"; "global" or "chunks" without sharding=
    implies sharding="global"; "chunks", for data larger than memory, takes chunk_samples and
    window_chunks, derived from stage_budget_bytes when left out: docs/shuffle.md),
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
    see ``Batch``), each ordered on the stream current at its ``next()``
    (``torch.cuda.current_stream()``) or on ``cuda_stream`` (a ``torch.cuda.Stream``, an
    object with ``cuda_stream`` or ``ptr``, or a cudaStream_t int; a ConfigError naming it
    when the loader stages on the CPU). ``tensors="numpy"``, and a torch built without
    CUDA, stage on the CPU: "auto" means the CPU there, and "cuda" is refused. ``state``: a dict from ``state()`` of
    an earlier run (any world size with ``sharding="global"``): the loader continues where it
    stopped.
    ``verify``: check every epoch exactly once (see ``Epoch``). ``shuffle_quality``: measure
    every epoch's shuffle-quality figure (``Epoch.shuffle_quality``). torch's idiom: ``set_epoch(e)``
    + ``for batch in loader`` + ``len(loader)``, ``state_dict()`` / ``load_state_dict()``.
    remainder="drop" that leaves samples out of every epoch is reported once (rank 0, a
    UserWarning and the "mpistage" logger).

    Over a ``StreamSource`` (``stream_source``, ``per_rank_stream``, ``open_sqlite``): options
    sharding ("chunk" | "hash" | "source"), chunk_size, hash_reading ("auto" | "keys" |
    "chunks" | "sources"; "auto" is "keys" for ``open_sqlite`` with a key column: each rank
    reads only the rows it owns, nothing forwarded; otherwise "chunks": read as "chunk", then
    each item sent to its owner),
    remainder ("rebalance" | "mask"), length_buckets, window_steps (steps per agreement),
    window_bytes, batch_size (or a budget: batch_bytes / batch_tokens with max_batch_samples,
    token_field), prefetch and io_threads (items read ahead by that many I/O threads while
    the trainer computes; 0, the default here, reads inside ``next()``: an iterable then runs
    on the thread that made it, as a ``sqlite3`` connection needs; with threads each iterable
    is advanced on an I/O thread, holding the GIL while it runs), timeout, device (batches
    copied to the device by the loader, as for files). File-only options (shuffle, seed,
    stage, two_phase, verify, ...) are a ConfigError naming them. An epoch is
    one pass over every stream; its length is known at its end (``len()`` is a TypeError);
    ids are ``(stream << 40) | position``; an error raised by a rank's iterable is raised on
    every rank as the same ``mpistage.Error``, chained (``__cause__``) from the original on
    that rank.
    Not thread-safe: one thread drives a loader.
    Raises: ConfigError, IoError, FormatError, MpiError; identical on every rank; TypeError
    naming the argument for a value of the wrong type.
    """

    def __init__(self, source, *, comm=None, state=None, tensors="torch", verify=False,
                 shuffle_quality=False, cuda_stream=None, **options):
        if not isinstance(verify, bool):
            raise TypeError(f"verify= takes a bool, got {type(verify).__name__} {verify!r}")
        if not isinstance(shuffle_quality, bool):
            raise TypeError(f"shuffle_quality= takes a bool, got "
                            f"{type(shuffle_quality).__name__} {shuffle_quality!r}")
        self._verify = verify
        self._shuffle_quality = shuffle_quality
        from .streams import StreamSource
        self._stream = isinstance(source, StreamSource)
        if not self._stream and not isinstance(source, Source):
            raise TypeError(f"source= takes an mpistage.Source (from open_source) or a "
                            f"StreamSource (stream_source, per_rank_stream, open_sqlite), got "
                            f"{type(source).__name__}")
        if self._stream:
            if verify:
                raise _core.ConfigError(
                    "verify=True checks the ids 0..N-1 of a Source; a stream's ids are "
                    "(stream << 40) | position, so it cannot be checked this way (give "
                    "verify=False)")
            if shuffle_quality:
                raise _core.ConfigError(
                    "shuffle_quality=True measures how far an order of the ids 0..N-1 is "
                    "from a full shuffle; a stream's items come in its query order, not "
                    "shuffled (give shuffle_quality=False)")
            # A stream's sharding and remainder are the stream plan's (StreamPlanOptions).
            for given, core_name in (("sharding", "stream_sharding"),
                                     ("remainder", "stream_remainder")):
                if given in options:
                    options[core_name] = options.pop(given)
            options.setdefault("io_threads", 0)
        else:
            source._check_open("mpistage.Loader")
        if state is not None and not isinstance(state, dict):
            raise TypeError(f"state= takes a dict from state() / state_dict(), got "
                            f"{type(state).__name__}")
        _choice(tensors, "tensors", ("torch", "numpy"))
        handle = _handle(comm)
        names = [f.name for f in source.fields] if self._stream else \
            [f["name"] for f in source.fields]
        _token_field(options, names)
        if not isinstance(options.get("device", "auto"), str):
            raise TypeError(f"device= takes 'auto', 'cpu', 'cuda' or 'cuda:N' (a str), got "
                            f"{type(options['device']).__name__} {options['device']!r}")
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
        given_stream = None if cuda_stream is None else stream_handle(cuda_stream, "cuda_stream")
        core_options = _core.LoaderOptions(**options)
        self._handle = handle
        self._options = core_options
        self._source = source
        self._tensors = tensors
        self._names = names
        self._dtypes = [f.dtype for f in source.fields] if self._stream else \
            [f["dtype"] for f in source.fields]
        if state is None:
            self._core = _core.Loader(handle, source._core, core_options)
        else:
            self._core = _core.Loader.restore(handle, source._core, core_options,
                                              json.dumps(state))
        device_name = self._core.stats["device"]
        self._cuda_device = int(device_name[5:]) if device_name.startswith("cuda:") else None
        self._cuda_stream = None
        if cuda_stream is not None:
            if self._cuda_device is None:
                self._core.close()
                raise _core.ConfigError(
                    f"cuda_stream= is given, but the loader stages on the CPU (device "
                    f"'{options.get('device', 'auto')}' resolved to {device_name}): host batches "
                    "are not ordered on a CUDA stream; leave cuda_stream= out or choose "
                    "device='cuda'")
            self._cuda_stream = given_stream
        if tensors == "torch":
            _torch_module()  # imported here, not inside the first epoch
        self._next_epoch = 0 if state is None else int(state["epoch"])
        if not self._stream:
            source._loaders.add(self)
        self._track()
        self._report_remainder()

    def _report_remainder(self):
        """Once per loader, on its rank 0: how many samples every epoch does not deliver
        (remainder="drop"), as a ``UserWarning`` (and the ``mpistage`` logger)."""
        dropped = self._core.totals["dropped_samples"]
        if dropped and self.rank == 0:
            message = (f"mpistage.Loader: remainder='drop' leaves {dropped} of "
                       f"{self.num_samples} samples out of every epoch (the last partial "
                       f"batch of the world); remainder='mask' or 'pad' delivers them")
            _log.info(message)
            warnings.warn(message, UserWarning, stacklevel=3)

    @classmethod
    def restore(cls, source, state, **kwargs):
        """Collective: a loader that continues where ``state`` (a dict) left off."""
        return cls(source, state=state, **kwargs)

    def epoch(self, epoch, *, max_steps=0, verify=None, shuffle_quality=None):
        """Collective: starts epoch ``epoch`` (an argument, never hidden state); returns an
        ``Epoch``. ``max_steps`` > 0 ends it after that many steps on every rank.
        ``verify``: check the epoch exactly once; ``shuffle_quality``: measure its
        shuffle-quality figure (see ``Epoch``; defaults: the loader's). Raises TypeError /
        ConfigError naming ``epoch=``, ``max_steps=``, ``verify=`` or ``shuffle_quality=``."""
        epoch = _count(epoch, "epoch")
        max_steps = _count(max_steps, "max_steps")
        verify = self._verify if verify is None else verify
        if not isinstance(verify, bool):
            raise TypeError(f"verify= takes a bool, got {type(verify).__name__} {verify!r}")
        quality = self._shuffle_quality if shuffle_quality is None else shuffle_quality
        if not isinstance(quality, bool):
            raise TypeError(f"shuffle_quality= takes a bool, got {type(quality).__name__} "
                            f"{quality!r}")
        if quality and self._stream:
            raise _core.ConfigError(
                "shuffle_quality=True measures an order of the ids 0..N-1; a stream's items "
                "come in its query order (give shuffle_quality=False)")
        return Epoch(self, self._core.epoch(epoch, max_steps), epoch, max_steps, verify,
                     quality)

    def set_epoch(self, epoch):
        """Not collective: the epoch the next ``iter(loader)`` yields (as
        ``DistributedSampler.set_epoch``; the same number on every rank). Without it each
        ``iter`` takes the epoch after the last one (0 first; after ``load_state_dict`` or
        ``state=``, the saved epoch's rest). Raises TypeError / ConfigError naming ``epoch=``."""
        self._next_epoch = _count(epoch, "epoch")

    def __iter__(self):
        """Collective: ``self.epoch(e)`` for the epoch of ``set_epoch`` (or the next one); every
        ``next`` is collective."""
        e = self._next_epoch
        self._next_epoch = e + 1
        return iter(self.epoch(e))

    def __len__(self):
        """Steps (batches per rank) of a whole epoch, equal on every rank. With a batch
        budget: those of epoch 0 (each epoch's own: ``len(loader.epoch(e))``); the first epoch
        of a resumed loader yields only its remaining steps."""
        if self._stream:
            raise TypeError("len() of a loader over a stream: a pass's length is known only "
                            "at its end")
        return self._core.totals["steps"]

    def _consumer_stream(self):
        """The cudaStream_t (an int; 0: the legacy default stream) the next batch is ordered
        on: ``cuda_stream=``, else torch's current stream on the loader's device."""
        if self._cuda_stream is not None:
            return self._cuda_stream
        return _torch_module().cuda.current_stream(self._cuda_device).cuda_stream

    def state(self):
        """Not collective, identical on every rank: where the job stands, as a plain dict
        (JSON-serialisable). Counts the batches returned so far."""
        return json.loads(self._core.state_json())

    def state_dict(self):
        """torchdata's ``Stateful`` protocol: ``state()`` (a plain dict, identical on every
        rank, JSON-serialisable, so ``torch.save`` / DCP take it)."""
        return self.state()

    def load_state_dict(self, state_dict):
        """Collective: continues where ``state_dict`` (from ``state_dict()`` / ``state()`` of
        an earlier run, any world size with ``sharding="global"``) stopped, as
        ``Loader.restore`` with this loader's source, options and communicator; the next
        ``iter`` yields the rest of the saved epoch. The loader is rebuilt (its ring and
        memory tier too); if the state is refused (ConfigError, the same on every rank) the
        loader is left as it was. Raises TypeError for a non-dict."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"load_state_dict: state_dict= takes a dict from state_dict(), got "
                            f"{type(state_dict).__name__}")
        if not self._stream:
            self._source._check_open("load_state_dict")
        core = _core.Loader.restore(self._handle, self._source._core, self._options,
                                    json.dumps(state_dict))
        old = self.__dict__.get("_core")
        self._core = core
        if old is not None:
            old.close()
        self._next_epoch = int(state_dict["epoch"])

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



