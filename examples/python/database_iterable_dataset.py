"""The seed's ``DatabaseIterableDataset`` rewritten on mpistage.

The usual version runs ``SELECT ... LIMIT/OFFSET`` per rank (or ``WHERE id % W = rank``), so
ranks get different row counts (deleted ids, filters) and DDP hangs at the end of the epoch;
and rows inserted between two ranks' queries are read twice or never.

Here mpistage's SQLite source opens one read snapshot agreed by all ranks, each rank steps
through the result and keeps its own chunks (``sharding="chunk"``), and the stream loader's
agreement gives every rank the same number of steps: every row exactly once.

    mpirun -np 3 python3 examples/python/database_iterable_dataset.py rows.db
"""
import os
import sqlite3
import sys

from mpi4py import MPI

import mpistage


def make_database(path, rows, comm=MPI.COMM_WORLD):
    """Rank 0 writes ``rows`` rows (id INTEGER, value REAL, text TEXT), ids with gaps."""
    if comm.rank == 0 and not os.path.exists(path):
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, value REAL, note TEXT)")
        db.executemany("INSERT INTO samples VALUES (?, ?, ?)",
                       [(3 * i, i / 2, "row %d" % i) for i in range(rows)])
        db.commit()
        db.close()
    comm.Barrier()


class DatabaseIterableDataset(mpistage.LoaderDataset):
    """Batches of the rows of ``query``: exactly once over the ranks, equal steps."""

    def __init__(self, path, query, batch_size=16, comm=None):
        self.source = mpistage.open_sqlite(path, query, comm=comm)
        loader = mpistage.Loader(self.source, comm=comm, sharding="chunk", chunk_size=8,
                                 batch_size=batch_size, timeout=60)
        super().__init__(loader)


def run(path, rows=250, comm=MPI.COMM_WORLD):
    """Returns (steps, ids seen by this rank)."""
    make_database(path, rows, comm)
    ds = DatabaseIterableDataset(path, "SELECT id, value, note FROM samples ORDER BY id",
                                 comm=comm)
    steps, ids = 0, []
    for batch in ds:
        steps += 1
        v = batch.valid
        ids.extend(batch["id"][v].tolist())
        assert (batch["value"][v] * 6 == batch["id"][v]).all()
    return steps, ids


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    steps, ids = run(sys.argv[1] if len(sys.argv) > 1 else "rows.db")
    counts = comm.gather((steps, len(ids)), root=0)
    if comm.rank == 0:
        print("steps per rank:", [c[0] for c in counts], "rows per rank:", [c[1] for c in counts])
