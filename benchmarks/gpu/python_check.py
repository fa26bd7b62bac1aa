"""The Python module on a GPU (benchmarks/gpu/bundle.sh's run.sh; docs/gpu.md): with the default
device ("auto") every field is a CUDA tensor over the loader's device memory with the writer's
values (h5py: x = id * 10 + column, y = id, u = id * 1000 mod 2^16 as uint16, which crosses
as int16), exactly once over the ranks, 2 epochs.
Usage: [mpiexec -np N] python3 python_check.py FILE.h5 (written here by rank 0)."""
import sys
import time

import numpy as np
import torch
from mpi4py import MPI
import mpistage

comm = MPI.COMM_WORLD
path = sys.argv[1]
n = 100003
if comm.rank == 0:
    import h5py
    with h5py.File(path, "w") as f:
        f["x"] = (np.arange(n)[:, None] * 10 + np.arange(3)[None, :]).astype(np.float32)
        f["y"] = np.arange(n, dtype=np.int64)
        f["u"] = (np.arange(n) * 1000 % 65536).astype(np.uint16)
comm.Barrier()
loader = mpistage.Loader(mpistage.open_source(path), batch_size=512, sharding="global",
                         shuffle="global", remainder="mask", timeout=60)
print(f"rank {comm.rank}: device {loader.stats['device']}, torch {torch.__version__}", flush=True)
cols = torch.arange(3, device="cuda", dtype=torch.float32)
for epoch in range(2):
    ids, bad, t0 = [], 0, time.perf_counter()
    for batch in loader.epoch(epoch):
        x, y, u = batch["x"], batch["y"], batch["u"]
        assert x.is_cuda and y.is_cuda and x.dtype == torch.float32 and tuple(x.shape) == (512, 3)
        assert u.is_cuda and u.dtype == torch.int16  # uint16 crosses as int16 (DLPack 0.6)
        valid = batch.valid.to("cuda")
        idx = batch.index.to("cuda")
        want = idx[:, None].float() * 10 + cols[None, :]
        bad += int(((x != want).any(dim=1) & valid).sum()) + int(((y != idx) & valid).sum())
        bad += int((((u.to(torch.int64) & 0xFFFF) != idx * 1000 % 65536) & valid).sum())
        ids.extend(batch.index[batch.valid].tolist())
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    every = np.sort(np.concatenate([np.asarray(a) for a in comm.allgather(ids)]))
    once = np.array_equal(every, np.arange(n))
    bad = comm.allreduce(bad)
    if comm.rank == 0:
        print(f"epoch {epoch}: {len(every)} ids, exactly once {once}, wrong values {bad}, "
              f"{dt:.3f} s on rank 0", flush=True)
    assert once and bad == 0
loader.close()
if comm.rank == 0:
    print("python on the GPU: OK", flush=True)
