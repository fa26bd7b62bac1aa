"""``mpistage convert idx`` and ``mpistage index`` from Python: the CLI's own commands, run by
the C++ library on the ranks of ``comm`` (collective), with the same checks and errors.

    mpistage.convert_idx("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "train.h5")
    mpistage.write_index(["a.tfrecord", "b.tfrecord"])     # a.tfrecord.idx, b.tfrecord.idx
"""
import os

from . import _mpistage as _core
from .loader import _count, _handle, _paths, _text_list


def _path(value, name):
    if isinstance(value, (str, bytes)) or hasattr(value, "__fspath__"):
        return os.fsdecode(os.fspath(value))
    raise TypeError(f"{name}= takes a path (str or os.PathLike), got {type(value).__name__}")


def convert_idx(images, labels, output, *, format="hdf5", chunk_rows=0, gzip_level=0, comm=None):
    """Collective over ``comm``: converts an IDX image file and an IDX label file (the MNIST /
    Fashion-MNIST format, gzip-compressed or not) into ``output``, as ``mpistage convert idx``.
    Rank 0 reads and writes; every rank returns or raises the same error.

    Args:
        images, labels: IDX files; ``images`` [N, ...] uint8, ``labels`` [N] uint8.
        output: the file written (via a temporary file renamed into place; a regular file or a
            new path). HDF5: datasets ``images`` (the IDX shape, e.g. [N, 28, 28]) and ``labels`` [N]; TFRecord:
            tf.train.Example records with features ``image`` (bytes) and ``label`` (int64).
        format: "hdf5" or "tfrecord".
        chunk_rows: HDF5 only: 0 writes contiguous datasets, else chunks of that many rows.
        gzip_level: HDF5 only, with ``chunk_rows``: 0 (none) to 9.
    Raises:
        ConfigError (bad arguments, an output that is not a regular file), IoError, FormatError,
        Hdf5Error: identical on every rank, naming the file.
    """
    if format not in ("hdf5", "tfrecord"):
        raise _core.ConfigError(f"format= must be 'hdf5' or 'tfrecord', got {format!r}")
    if isinstance(gzip_level, bool) or not isinstance(gzip_level, int) or not 0 <= gzip_level <= 9:
        raise _core.ConfigError(f"gzip_level= takes an int from 0 to 9, got {gzip_level!r}")
    _core.convert_idx(_handle(comm), _path(images, "images"), _path(labels, "labels"),
                      _path(output, "output"), format, _count(chunk_rows, "chunk_rows"),
                      gzip_level)


def write_index(files, outputs=None, *, comm=None):
    """Collective over ``comm``: writes a DALI-compatible index (``"<offset> <size>"`` per
    record) of each TFRecord file, as ``mpistage index``: the ranks scan their byte ranges in
    parallel and rank 0 writes. ``outputs``: one path per file; default ``FILE.idx``.

    Raises:
        ConfigError (a count mismatch, a gzip file), IoError, FormatError (a corrupt record,
        naming the file and offset): identical on every rank.
    """
    files = _text_list(_paths(files), "files")
    outputs = [] if outputs is None else _text_list(_paths(outputs), "outputs")
    if outputs and len(outputs) != len(files):
        raise _core.ConfigError(f"outputs= has {len(outputs)} paths for {len(files)} files "
                                f"(one per file, or None for FILE.idx)")
    _core.write_index(_handle(comm), files, outputs)
