"""The three seed examples rewritten on mpistage (examples/python/) with streams of unequal
length per rank: every rank takes the same number of steps and every item is yielded exactly
once."""
import os
import sys

import numpy as np
from conftest import COMM, same_on_every_rank

sys.path.insert(0, os.path.join(os.environ.get("MPISTAGE_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "examples", "python"))

import camera_stream_dataset  # noqa: E402
import database_iterable_dataset  # noqa: E402
import distributed_iterable_dataset  # noqa: E402


def test_distributed_iterable_dataset():
    steps, labels = distributed_iterable_dataset.run(103)
    assert same_on_every_rank(steps)
    everyone = sorted(x for part in COMM.allgather(labels) for x in part)
    assert everyone == list(range(103))


def test_database_iterable_dataset(workdir):
    steps, ids = database_iterable_dataset.run(os.path.join(workdir, "rows.db"), rows=250)
    assert same_on_every_rank(steps)
    everyone = sorted(x for part in COMM.allgather(ids) for x in part)
    assert everyone == [3 * i for i in range(250)]


def test_camera_stream_dataset():
    frames = lambda r: 20 + 15 * r  # noqa: E731  (unequal per rank)
    steps, seen = camera_stream_dataset.run(frames)
    assert same_on_every_rank(steps)
    everyone = sorted(p for part in COMM.allgather(seen) for p in part)
    assert everyone == sorted((r, i) for r in range(COMM.size) for i in range(frames(r)))
    assert len(np.unique(np.array(everyone), axis=0)) == len(everyone)
