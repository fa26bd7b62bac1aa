"""mpistage from Python: the C++ loader (reading, sharding, shuffling, staging, agreement, the
watchdog) feeding PyTorch training scripts; Python only receives batches.

    from mpistage import open_source, Loader
    source = open_source("train.h5", fields=["images", "labels"])      # collective
    loader = Loader(source, batch_size=64, shuffle="global", sharding="global", seed=1)
    for epoch in range(3):
        for batch in loader.epoch(epoch):                               # collective per step
            x, y, valid = batch["images"], batch["labels"], batch.valid  # torch.Tensor, no copy

Importing the package imports ``mpi4py.MPI`` (which initialises MPI). Every object takes a
``comm`` (an ``mpi4py.MPI.Comm``, default ``COMM_WORLD``); the library duplicates it, so it works
beside ``torch.distributed`` (gloo) in the same process. Errors are the exception classes below,
with the C++ library's messages, raised identically on every rank.
"""
from mpi4py import MPI  # noqa: F401  (initialises MPI before any mpistage call)

from ._mpistage import (  # noqa: F401
    ConfigError,
    CudaError,
    Error,
    FormatError,
    Hdf5Error,
    IoError,
    MpiError,
    version as __version__,
)
from .batch import Batch  # noqa: F401
from .convert import convert_idx, write_index  # noqa: F401
from .loader import Epoch, Loader, Source, open_source  # noqa: F401
from .stop import (  # noqa: F401
    EXIT_STOPPED,
    clear_stop_request,
    install_stop_signals,
    request_stop,
    stop_requested,
    stop_signal,
)
from .streams import (  # noqa: F401
    Field,
    StreamSource,
    open_sqlite,
    per_rank_stream,
    stream_source,
)

__all__ = [
    "Batch", "ConfigError", "CudaError", "EXIT_STOPPED", "Epoch", "Error", "Field",
    "FormatError", "Hdf5Error", "IoError", "Loader", "MpiError", "Source",
    "StreamSource", "clear_stop_request", "install_stop_signals", "open_source", "open_sqlite",
    "per_rank_stream", "request_stop", "stop_requested", "stop_signal", "stream_source",
    "convert_idx", "write_index",
]


def __getattr__(name):
    # The torch adapter imports torch.utils.data; load it only when asked for.
    if name in ("LoaderDataset", "StreamDataset"):
        from . import data
        return getattr(data, name)
    raise AttributeError(f"module 'mpistage' has no attribute {name!r}")
