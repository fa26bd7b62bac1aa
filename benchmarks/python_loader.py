#!/usr/bin/python3
"""mpistage driven from Python (the `mpistage` module), one process per MPI rank, the same
output as torch_baselines.py so benchmarks/side_by_side.py and python_vs_torch.py compare them
on the same file, fields, batch size and epochs.

Each epoch iterates `loader.epoch(e)` and touches every field tensor (`.shape`), as a training
loop would before its step. The Python overhead per batch is the time of the loop beyond the
C++ loader's own work: (time inside `next()` - the loader's wait_s) / batches, i.e. the
tuple -> torch.Tensor hand-off and the iterator, measured on each rank (the slowest reported).

Prints one JSON line from rank 0: {"load_seconds": construction incl. staging (slowest rank),
"epoch_seconds": [slowest rank per epoch], "samples_per_epoch", "steps_per_epoch",
"python_overhead_us_per_batch"}.
Usage: python_loader.py STAGE SHUFFLE FILE BATCH EPOCHS FIELD...   (STAGE none|memory)
"""
import json
import sys
import time

from mpi4py import MPI

import mpistage


def main():
    stage, shuffle, path, batch, epochs = sys.argv[1], sys.argv[2], sys.argv[3], \
        int(sys.argv[4]), int(sys.argv[5])
    fields = sys.argv[6:]
    comm = MPI.COMM_WORLD
    comm.Barrier()
    t0 = time.perf_counter()
    source = mpistage.open_source(path, fields=fields)
    loader = mpistage.Loader(source, batch_size=batch, stage=stage, shuffle=shuffle,
                             sharding="global" if shuffle == "global" else "byte_range",
                             remainder="pad", prefetch=4, io_threads=1, device="cpu",
                             log_device_fallback=False)
    load = time.perf_counter() - t0
    times, count, steps, in_next = [], 0, 0, 0.0
    wait0 = loader.stats["wait_s"]
    for e in range(epochs):
        comm.Barrier()
        t0 = time.perf_counter()
        it = loader.epoch(e)
        while True:
            t1 = time.perf_counter()
            b = next(it, None)
            in_next += time.perf_counter() - t1
            if b is None:
                break
            shapes = [t.shape for t in b.fields.values()]  # what a training step touches
            count += shapes[0][0]
            steps += 1
        times.append(time.perf_counter() - t0)
    overhead = (in_next - (loader.stats["wait_s"] - wait0)) / max(steps, 1) * 1e6
    loader.close()
    load = comm.reduce(load, op=MPI.MAX, root=0)
    times = [comm.reduce(t, op=MPI.MAX, root=0) for t in times]
    count = comm.reduce(count, op=MPI.SUM, root=0)
    steps = comm.reduce(steps, op=MPI.MAX, root=0)
    overhead = comm.reduce(overhead, op=MPI.MAX, root=0)
    if comm.rank == 0:
        print(json.dumps({"load_seconds": load, "epoch_seconds": times,
                          "samples_per_epoch": count // epochs, "steps_per_epoch": steps // epochs,
                          "python_overhead_us_per_batch": overhead}))


if __name__ == "__main__":
    main()
