"""Data-parallel training of the MLP of examples/train_fashion_mnist.cpp (784 -> 128 -> 10,
ReLU, Adam 2e-3) on Fashion-MNIST with PyTorch DDP (gloo), fed by mpistage from Python.

Every rank reads its own shard through an mpistage Loader (equal steps on every rank, so DDP's
gradient allreduce never hangs); the loss of a step is the sum over the rank's valid samples
divided by the global valid count / W, so DDP's gradient average is the exact mean over the
global batch and padding slots weigh 0. After each epoch the whole test set is evaluated
(remainder "mask": each of the 10,000 images counted exactly once over all ranks).

    mpistage convert idx train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz -o train.h5
    mpistage convert idx t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz -o test.h5
    mpirun -np 4 python3 examples/python/train_fashion_mnist.py \\
        train.h5 test.h5 --epochs 3 [--min-accuracy 85]

MPI (mpi4py) starts the processes and gives rank and world size; torch.distributed runs
beside it over gloo, initialised from MPI by mpistage.distributed.init_process_group.
"""
import argparse
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from mpi4py import MPI

import mpistage
from mpistage.distributed import init_process_group


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def features(batch):
    return batch["images"].reshape(batch.size, 784).float().div_(255)


def train_epoch(model, opt, loader, epoch, world):
    """Collective: one epoch; returns (mean loss, train accuracy, steps, seconds waiting)."""
    model.train()
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, valid
    steps = 0
    wait = 0.0
    loader.set_epoch(epoch)  # as DistributedSampler.set_epoch: each epoch its own order
    t0 = time.perf_counter()
    for batch in loader:  # every next() is collective; len(loader) steps on every rank
        wait += time.perf_counter() - t0
        valid = batch.valid.float()
        count = valid.sum().reshape(1)
        dist.all_reduce(count)  # global valid samples of this step
        logits = model(features(batch))
        y = batch["labels"].long()
        per_sample = F.cross_entropy(logits, y, reduction="none") * valid
        loss = per_sample.sum() * world / count.clamp(min=1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        totals += torch.tensor([per_sample.sum().item(),
                                ((logits.argmax(1) == y).float() * valid).sum().item(),
                                valid.sum().item()], dtype=torch.float64)
        steps += 1
        t0 = time.perf_counter()
    dist.all_reduce(totals)
    return totals[0] / totals[2], totals[1] / totals[2], steps, wait


@torch.no_grad()
def evaluate(model, loader, epoch):
    """Collective: (correct, counted) over the whole test set, all ranks together."""
    model.eval()
    counts = torch.zeros(2, dtype=torch.float64)
    loader.set_epoch(epoch)
    for batch in loader:
        valid = batch.valid
        pred = model(features(batch)).argmax(1)
        counts += torch.tensor([(pred[valid] == batch["labels"][valid].long()).sum().item(),
                                valid.sum().item()], dtype=torch.float64)
    dist.all_reduce(counts)
    return counts[0].item(), counts[1].item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("train")
    p.add_argument("test")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--min-accuracy", type=float, default=0,
                   help="exit 1 unless the final test accuracy (percent) reaches it")
    p.add_argument("--shuffle", choices=["local", "global", "chunks"], default="local",
                   help="order of the training samples (mpistage.Loader shuffle=): local "
                   "(each rank's byte-range shard), global, or chunks (data larger than memory, "
                   "docs/shuffle.md)")
    p.add_argument("--stage-budget", type=int, default=0,
                   help="bytes of memory per rank for the training data (stage_budget_bytes): "
                   "with --shuffle chunks it sizes the chunks read ahead")
    p.add_argument("--window-chunks", type=int, default=0,
                   help="--shuffle chunks: chunks shuffled together per rank (0: the loader's "
                   "default)")
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    torch.set_num_threads(a.torch_threads)
    torch.manual_seed(a.seed)
    # torch.distributed over gloo on the ranks MPI started (RANK, WORLD_SIZE, MASTER_ADDR and a
    # free MASTER_PORT derived from MPI); the batches are host tensors, hence gloo, not nccl.
    init_process_group(backend="gloo", comm=comm)
    model = torch.nn.parallel.DistributedDataParallel(Mlp())
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    common = dict(batch_size=a.batch_size, seed=a.seed, remainder="mask", prefetch=4,
                  device="cpu", log_device_fallback=False)
    budget = dict(stage_budget_bytes=a.stage_budget) if a.stage_budget else {}
    if a.window_chunks:
        budget["window_chunks"] = a.window_chunks
    train_loader = mpistage.Loader(mpistage.open_source(a.train, fields=["images", "labels"]),
                                   shuffle=a.shuffle, **budget, **common)
    if comm.rank == 0 and train_loader.stats["shuffle_note"]:
        print(f"shuffle {a.shuffle}: {train_loader.stats['shuffle_note']}", flush=True)
    test_loader = mpistage.Loader(mpistage.open_source(a.test, fields=["images", "labels"]),
                                  shuffle="none", **common)
    accuracy = 0.0
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        loss, train_acc, steps, wait = train_epoch(model, opt, train_loader, epoch, comm.size)
        correct, counted = evaluate(model, test_loader, epoch)
        if counted != test_loader.num_samples:
            raise mpistage.Error(f"evaluation counted {counted} of {test_loader.num_samples}")
        accuracy = 100.0 * correct / counted
        wait = comm.allreduce(wait, op=MPI.MAX)
        if comm.rank == 0:
            print(f"epoch {epoch}: {steps} steps, loss {loss:.4f}, train accuracy "
                  f"{100 * train_acc:.2f} %, test accuracy {accuracy:.2f} % "
                  f"({int(counted)} images), waited for data {wait:.2f} s of "
                  f"{time.perf_counter() - t0:.2f} s", flush=True)
    train_loader.close()
    test_loader.close()
    dist.destroy_process_group()
    if accuracy < a.min_accuracy:
        if comm.rank == 0:
            print(f"test accuracy {accuracy:.2f} % is below {a.min_accuracy} %", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
