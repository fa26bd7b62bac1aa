"""When the C++ objects behind the Python wrappers are destroyed.

Destroying a loader, an epoch or a source is collective (the loader checks that every rank left
its epoch at the same step and frees its communicator; a parallel HDF5 file closes
collectively), so it must happen at the same point of the program on every rank. Plain
reference counting gives that: a wrapper whose last reference goes away in the same statement
on every rank releases its C++ object there. Python's cyclic garbage collector does not: it
runs when a rank's own allocation count says so (a traceback held by an exception, e.g. in
pytest, makes such a cycle). So a wrapper finalised during a collection keeps its C++ object
in a registry instead, and ``release_all`` (called at interpreter exit, before mpi4py
finalises MPI, as this module registers its hook after importing ``mpi4py.MPI``) destroys
everything still alive, newest first (epochs before their loader, loaders before their
source), the same order on every rank. ``close()`` on a wrapper releases it at once.
"""
import atexit
import gc
import itertools
import weakref

from mpi4py import MPI  # noqa: F401  (its exit hook must be registered before ours)

_in_collection = False
_sequence = itertools.count()
_live = {}      # sequence number -> weakref to the wrapper
_deferred = {}  # sequence number -> C++ object kept until release_all


def _on_gc(phase, info):
    global _in_collection
    _in_collection = phase == "start"


gc.callbacks.append(_on_gc)


class Tracked:
    """Base of the wrappers that own a collective C++ object in ``self._core``."""

    def _track(self):
        self._seq = next(_sequence)
        _live[self._seq] = weakref.ref(self)

    def _release(self):
        """Destroys the C++ object now (collective for loaders and HDF5 sources)."""
        self.__dict__.pop("_core", None)
        _live.pop(getattr(self, "_seq", None), None)

    def __del__(self):
        seq = getattr(self, "_seq", None)
        _live.pop(seq, None)
        core = self.__dict__.get("_core")
        if _in_collection and core is not None:
            _deferred[seq] = core


@atexit.register
def release_all():
    from . import _mpistage
    _mpistage.settle()  # a next() that Ctrl-C interrupted completes first (with its peers)
    for seq in sorted(set(_live) | set(_deferred), reverse=True):
        if seq in _deferred:
            del _deferred[seq]
        else:
            ref = _live.get(seq)
            obj = ref() if ref is not None else None
            if obj is not None:
                obj._release()
