"""Stream sources from Python, read by the one ``mpistage.Loader`` (include/mpistage/stream.hpp).

A user's Python iterables (a Kafka consumer, a database cursor, a camera, a generator) become
the sub-streams of a ``StreamSource``; ``Loader(stream_source, ...)`` shards them (chunk / hash /
source), batches them by count or bytes, and agrees collectively once per window of steps
whether any rank still holds items, so uneven streams end together on every rank instead of
deadlocking, and every item is yielded by exactly one rank.
"""

import numpy as np

from . import _lifetime
from . import _mpistage as _core
from .loader import _handle

_KEY_MASK = (1 << 64) - 1

# The exception a user's iterable (or ``make``) raised on this rank, kept so that the agreed
# mpistage.Error raised here is chained from it (``raise agreed from original``): its type and
# traceback stay reachable on the rank where it happened. Newest last.
_raised = []


def _recording(fn):
    """``fn`` with the exceptions it raises recorded in ``_raised``."""
    def call(*args):
        try:
            return fn(*args)
        except Exception as e:
            _raised.append(e)
            raise
    return call


class Field:
    """One field of every item: ``name``, numpy ``dtype`` name, fixed ``shape`` of one item
    (``()`` for a scalar), or ``ragged=True`` for variable-length 1-D values (bytes, text,
    token lists; ``shape`` ignored)."""

    def __init__(self, name, dtype="uint8", shape=(), ragged=False):
        self.name = name
        self.dtype = np.dtype(dtype).name if dtype != "bool" else "bool"
        self.shape = tuple(int(d) for d in shape)
        self.ragged = bool(ragged)

    def _spec(self):
        dtype = "boolean" if self.dtype == "bool" else self.dtype
        return (self.name, dtype, list(self.shape), self.ragged)


def _as_buffer(value, field):
    if isinstance(value, (bytes, bytearray, memoryview)) and field.dtype == "uint8":
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # torch.Tensor
        value = value.detach().cpu().numpy()
    return np.ascontiguousarray(value, dtype=field.dtype)


def _items(iterable, fields, key):
    """(key, [buffers]) per item of ``iterable``; items are dicts by field name, tuples/lists
    in field order, or (one field) the value itself."""
    single = len(fields) == 1
    iterator = iter(iterable)
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except Exception as e:
            _raised.append(e)
            raise
        if isinstance(item, dict):
            values = [item[f.name] for f in fields]
        elif single and not isinstance(item, (tuple, list)):
            values = [item]
        else:
            values = item
        buffers = [_as_buffer(v, f) for v, f in zip(values, fields)]
        if len(values) != len(fields):
            buffers = list(values)  # the C++ side names the count mismatch
        yield (None if key is None else int(key(item)) & _KEY_MASK, buffers)


class StreamSource(_lifetime.Tracked):
    """Sub-streams of items with the same fields (see ``stream_source``)."""

    def __init__(self, core, fields):
        self._core = core
        self.fields = list(fields)
        self._track()

    @property
    def num_streams(self):
        return self._core.num_streams



def stream_source(fields, make, num_streams=1, *, fingerprint, weights=None, key=None):
    """Local: a StreamSource of ``num_streams`` sub-streams; ``make(s)`` returns the iterable of
    stream ``s`` (called on the rank(s) that read it, each time a pass opens it).

    Args:
        fields: list of ``Field``.
        fingerprint: text identifying the data, equal on every rank (ranks compare it; a
            resumed state must carry the same).
        weights: relative cost per stream (``sharding="source"`` balances ranks by it).
        key: ``key(item) -> int`` routing items under ``sharding="hash"``; default the
            content hash of the item.
    Errors raised by ``make`` or the iterables become an ``mpistage.Error`` naming stream and
    item, raised on every rank at the same step.
    """
    fields = list(fields)
    core = _core.python_stream_source([f._spec() for f in fields], num_streams,
                                      lambda s: _items(_recording(make)(s), fields, key),
                                      fingerprint,
                                      list(weights or []))
    return StreamSource(core, fields)


def per_rank_stream(iterable, fields, *, fingerprint, comm=None, key=None):
    """Collective-free helper: this rank's own iterable (a camera, a consumer) as stream
    ``rank`` of a source with one stream per rank. Use it with ``sharding="source"``: stream
    r is read by rank r (equal weights), and the loader's agreement ends all ranks together
    when the last stream runs dry (``remainder="rebalance"`` keeps batches full meanwhile)."""
    from mpi4py import MPI
    c = MPI.COMM_WORLD if comm is None else comm
    rank = c.Get_rank()

    def make(s):
        if s != rank:
            raise RuntimeError(f"stream {s} belongs to rank {s}; use sharding='source'")
        return iterable

    return stream_source(fields, make, c.Get_size(), fingerprint=fingerprint, key=key)


def open_sqlite(path, query, *, key_column="", range_column="", range_streams=64, nulls="error",
                fill_value=0.0, comm=None):
    """Collective: a SQLite query as a StreamSource (mpistage::SqliteSource): rows are items,
    columns fields (INTEGER -> int64, REAL -> float64, TEXT/BLOB -> ragged uint8)."""
    core = _core.sqlite_source(_handle(comm), str(path), query, key_column, range_column,
                               range_streams, nulls, fill_value)
    return StreamSource(core, [Field(f["name"], "bool" if f["dtype"] == "boolean" else f["dtype"],
                                     f["shape"], f["ragged"]) for f in core.fields])
