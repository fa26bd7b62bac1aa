"""``torch.utils.data.IterableDataset`` adapters, for code that expects a ``DataLoader``.

    loader = mpistage.Loader(source, batch_size=64, shuffle="global", sharding="global")
    data = torch.utils.data.DataLoader(mpistage.LoaderDataset(loader), batch_size=None)
    for epoch in range(3):
        for batch in data:          # epoch 0, 1, 2: advanced by each new iteration
            ...

Pitfalls this removes, compared with ``IterableDataset`` + ``DistributedSampler`` code:
- every rank reading the same samples (or every worker of every rank): the shard is mpistage's,
  exactly once over all ranks, and the adapter refuses ``num_workers > 0`` (worker processes
  would each iterate the whole shard, and fork a process that holds MPI and HDF5 handles);
- ranks yielding different numbers of batches, so DDP's allreduce hangs: every epoch has the
  same number of steps on every rank, decided before the first batch (streams: agreed at each
  step until every rank is dry);
- forgetting ``sampler.set_epoch(e)`` (the same order every epoch): each ``iter()`` starts the
  next epoch (``set_epoch`` sets it explicitly, e.g. after a resume);
- batching twice: the loader yields whole batches, so pass ``batch_size=None`` (automatic
  batching off). ``pin_memory`` is not needed: the loader's ring is pinned when it stages on
  a CUDA device.
Every ``next`` is collective, as the loader's; iterate on every rank.
"""
import sys

import torch.utils.data

from . import _mpistage as _core


def _calling_dataloader(dataset, depth=8):
    """The ``torch.utils.data.DataLoader`` among the callers (up to ``depth`` frames) that
    iterates ``dataset``, or None: ``DataLoader.__iter__`` makes the fetcher that calls
    ``iter(dataset)``, so its frame is a few levels up."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        for value in frame.f_locals.values():
            if isinstance(value, torch.utils.data.DataLoader) and value.dataset is dataset:
                return value
        frame = frame.f_back
    return None


class LoaderDataset(torch.utils.data.IterableDataset):
    """Yields the ``Batch``es of ``loader.epoch(e)`` (a ``Loader`` over files or streams),
    e = ``start_epoch``, ``start_epoch + 1``, ... one per iteration."""

    def __init__(self, loader, start_epoch=0):
        super().__init__()
        self.loader = loader
        self.epoch = start_epoch

    def set_epoch(self, epoch):
        """The epoch the next iteration yields."""
        self.epoch = epoch

    def __iter__(self):
        if torch.utils.data.get_worker_info() is not None:
            raise _core.ConfigError(
                "LoaderDataset: DataLoader num_workers must be 0 (the mpistage loader reads in "
                "its own threads; worker processes would each iterate the whole shard)")
        data = _calling_dataloader(self)
        if data is not None and data.batch_size is not None:
            # Checked on every rank before the epoch starts (the same DataLoader arguments
            # everywhere), so no rank enters the epoch's collective alone.
            raise _core.ConfigError(
                f"LoaderDataset: DataLoader(batch_size={data.batch_size}) batches the loader's "
                "batches again; use batch_size=None: the loader already batches (set "
                "batch_size= on the mpistage Loader)")
        epoch = self.epoch
        self.epoch += 1
        return iter(self.loader.epoch(epoch))


StreamDataset = LoaderDataset
