"""The seed's ``CameraStreamDataset`` rewritten on mpistage.

The usual version has each rank read its own camera in an ``IterableDataset``; cameras deliver
different numbers of frames (a camera stops, drops frames), so one rank's loop ends first and
the others hang in DDP's allreduce, or a rank with a fast camera trains on more data.

Here each rank's camera is stream ``rank`` of one source (``per_rank_stream``, read by that rank
only: ``sharding="source"``); batches are formed by a byte budget (frames of several sizes),
and at every step the ranks agree whether any camera still has frames: ranks whose camera
stopped receive frames from the others (``remainder="rebalance"``), and all ranks end at the
same step when the last camera stops. Every frame is yielded exactly once.

    mpirun -np 3 python3 examples/python/camera_stream_dataset.py
"""
import numpy as np
from mpi4py import MPI

import mpistage


def camera(rank, frames):
    """A simulated camera: ``frames`` frames of 8 x 8 x (1 + frame % 3) uint8 pixels (ragged)."""
    for i in range(frames):
        pixels = np.full(64 * (1 + i % 3), (rank * 1000 + i) % 251, dtype=np.uint8)
        yield {"frame": pixels, "camera": rank, "number": i}


class CameraStreamDataset(mpistage.LoaderDataset):
    """Batches of at most ``batch_bytes`` of this rank's camera frames and the others'."""

    def __init__(self, frames_here, batch_bytes=1024, comm=None):
        c = MPI.COMM_WORLD if comm is None else comm
        fields = [mpistage.Field("frame", "uint8", ragged=True),
                  mpistage.Field("camera", "int64"), mpistage.Field("number", "int64")]
        self.source = mpistage.per_rank_stream(camera(c.rank, frames_here), fields,
                                               fingerprint="cameras", comm=c)
        loader = mpistage.Loader(self.source, comm=c, sharding="source",
                                 remainder="rebalance", max_batch_samples=64,
                                 batch_bytes=batch_bytes, timeout=60)
        super().__init__(loader)


def run(frames_of_rank=lambda r: 20 + 15 * r, comm=MPI.COMM_WORLD):
    """Returns (steps, (camera, number) pairs seen by this rank)."""
    ds = CameraStreamDataset(frames_of_rank(comm.rank), comm=comm)
    steps, seen = 0, []
    for batch in ds:
        steps += 1
        v = batch.valid
        offsets = batch.offsets["frame"]
        assert int(offsets[-1]) <= 1024 or batch.num_valid == 1
        for slot in np.nonzero(v.numpy())[0]:
            cam, num = int(batch["camera"][slot]), int(batch["number"][slot])
            pixels = batch["frame"][int(offsets[slot]):int(offsets[slot + 1])]
            assert len(pixels) == 64 * (1 + num % 3)
            assert int(pixels[0]) == (cam * 1000 + num) % 251
            seen.append((cam, num))
    return steps, seen


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    steps, seen = run()
    counts = comm.gather((steps, len(seen)), root=0)
    if comm.rank == 0:
        print("steps per rank:", [c[0] for c in counts], "frames per rank:", [c[1] for c in counts])
