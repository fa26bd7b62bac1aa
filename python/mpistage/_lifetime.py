"""Releases the C++ objects still alive at interpreter exit before mpi4py finalises MPI.

mpi4py finalises MPI at exit; an HDF5 file or a communicator freed after that would fail. This
module's ``atexit`` hook is registered after ``mpi4py.MPI`` was imported, so it runs first.
Loaders are released before the sources they read.
"""
import atexit
import weakref

_loaders = weakref.WeakSet()
_sources = weakref.WeakSet()


def track_loader(obj):
    _loaders.add(obj)


def track_source(obj):
    _sources.add(obj)


@atexit.register
def _release_all():
    for group in (_loaders, _sources):
        for obj in list(group):
            obj._release()
