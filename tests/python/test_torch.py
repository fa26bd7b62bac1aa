"""mpistage beside torch.distributed (gloo) in the same processes, the DataLoader adapter, and
the GIL released while a call waits for a peer (2 ranks: only peers are needed)."""
import socket
import threading
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.utils.data
from conftest import COMM, TIMEOUT, gather_ids, same_on_every_rank

import mpistage

N = 103


def init_gloo():
    if dist.is_initialized():
        return
    port = None
    if COMM.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = COMM.bcast(port, root=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=COMM.rank,
                            world_size=COMM.size)


def test_beside_gloo_and_through_a_dataloader(small_h5):
    init_gloo()
    loader = mpistage.Loader(mpistage.open_source(small_h5), batch_size=6, sharding="global",
                             shuffle="global", remainder="mask", timeout=TIMEOUT, device="cpu")
    data = torch.utils.data.DataLoader(mpistage.LoaderDataset(loader), batch_size=None)
    orders = []
    for _ in range(2):  # each iteration is the next epoch: no set_epoch to forget
        count, steps, order = torch.zeros(1), 0, []
        for batch in data:
            count += batch.num_valid
            steps += 1
            dist.all_reduce(torch.ones(1))  # a collective per step, as DDP makes
            order.extend(batch.index[batch.valid].tolist())
        dist.all_reduce(count)
        assert count.item() == N and same_on_every_rank(steps)
        assert np.array_equal(np.sort(gather_ids(order)), np.arange(N))
        orders.append(order)
    assert orders[0] != orders[1]  # epochs 0 and 1 are shuffled differently


@pytest.mark.skipif(COMM.size < 2, reason="needs a peer")
def test_gil_released_while_waiting_for_a_peer(small_h5):
    source = mpistage.open_source(small_h5)
    ticks = [0]
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    thread = threading.Thread(target=count)
    thread.start()
    if COMM.rank == 1:
        time.sleep(1.5)  # rank 0 waits in the collective construction meanwhile
    before = ticks[0]
    t0 = time.perf_counter()
    loader = mpistage.Loader(source, batch_size=4, timeout=TIMEOUT, device="cpu")
    waited = time.perf_counter() - t0
    during = ticks[0] - before
    done.set()
    thread.join()
    if COMM.rank == 0:
        assert waited > 1.0
        assert during > 50, f"the counting thread ran {during} times in {waited:.2f} s"
    del loader
