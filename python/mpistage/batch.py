"""The batch type every mpistage loader yields in Python."""
import collections.abc
import weakref

_torch = None


def _torch_module():
    global _torch
    if _torch is None:
        import torch
        _torch = torch
    return _torch


def stream_handle(stream, name="stream"):
    """The cudaStream_t of ``stream`` as an int (0: the legacy default stream): a
    ``torch.cuda.Stream`` (or any object with ``cuda_stream``, as torch's, or ``ptr``, as
    CuPy's), or an int handle. Raises TypeError / ValueError naming ``name=``."""
    handle = stream
    for attribute in ("cuda_stream", "ptr"):
        if not isinstance(stream, int) and hasattr(stream, attribute):
            handle = getattr(stream, attribute)
            break
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(f"{name}= takes a torch.cuda.Stream, an object with cuda_stream or ptr "
                        f"(CuPy), or a cudaStream_t as an int, got {type(stream).__name__} "
                        f"{stream!r}")
    if handle < 0:
        raise ValueError(f"{name}={handle}: a cudaStream_t is not negative (0 is the legacy "
                         "default stream)")
    return handle


class Batch(collections.abc.Mapping):
    """One batch of one rank, its fields viewing the loader's ring slot without a copy.

    A ``collections.abc.Mapping`` of field name -> tensor, as torch code expects of a batch:
    ``batch["images"]``, ``keys()`` / ``items()`` / ``values()``, ``"labels" in batch``,
    ``for name in batch``, ``len(batch)`` = the number of fields. ``valid`` and ``index`` are
    attributes, not keys (they describe the slots, they are not data); ``size`` is the batch
    size B. ``to(device, non_blocking=False)`` returns a Batch of the moved tensors.

    Attributes:
        epoch, step: ints; ``step`` is equal on every rank for the same batch.
        index: int64 tensor [B], the global sample id of each slot (-1 for padding).
        valid: bool tensor [B], True where the slot holds a sample counted in this epoch.
        num_valid: int, number of True in ``valid``.
        fields: dict name -> tensor. Fixed fields: [B, *sample_shape] of the field's dtype
            (e.g. images uint8 [B, 28, 28], labels uint8 [B]). Ragged fields: the
            concatenated values, 1-D; ``offsets[name]`` gives int64 [B + 1] byte offsets.
        offsets: dict name -> int64 tensor [B + 1] for ragged fields only.

    On a CUDA device (``Loader(device="cuda")``, or ``"auto"`` finding a GPU) the fields are
    CUDA tensors over the loader's device memory (DLPack, no copy; ``index``, ``valid`` and
    ``offsets`` stay host tensors). Each batch is ordered on the stream that is current when
    ``next()`` returns it (``torch.cuda.current_stream()``, or the loader's ``cuda_stream=``):
    kernels queued there afterwards see the copied bytes, with no host wait and no
    ``wait_stream``, and the batch's device block is reused only after the work queued on that
    stream when its last tensor is gone. To read a batch on another stream too, call
    ``batch.record_stream(s)`` first (as ``Tensor.record_stream``; torch's own does not reach
    this memory). The fields reach torch through the DLPack protocol (the extension's
    ``DeviceField.__dlpack__(stream=)``, which ``torch.from_dlpack`` calls with its current
    stream). Handing a field on to CuPy or JAX (``cupy.from_dlpack(batch["x"])``) orders their
    stream after torch's through torch's own ``__dlpack__``; ``batch.record_stream(their
    stream)`` keeps the block until their work is done.
    Holding CUDA batches does not hold ring slots (a slot returns once its copy is done): the
    loader's device pool grows by one block per batch held beyond its depth and is trimmed at
    each epoch's end.

    Ownership: the tensors (``torch.Tensor`` built with ``torch.from_numpy``, or the numpy
    arrays with ``tensors="numpy"``) share one owner of the batch's ring slot; the slot
    returns to the loader when the last of them is gone, so they stay valid after the loader
    moved on (CUDA fields: each holds the batch's device block in the same way). A rank
    holding ``prefetch`` host batches alive leaves the loader no slot to fill (an error on
    every rank, naming it): copy what must outlive many steps. Writing into the tensors
    changes only this batch. Thread safety: read-only use from any thread.
    """

    __slots__ = ("epoch", "step", "num_valid", "index", "valid", "fields", "offsets",
                 "_device", "__weakref__")
    __hash__ = None  # a Mapping of tensors: compared by content, not hashable
    # Live batches by the id of their first field's tensor: torch's DataLoader (batch_size=None)
    # passes every item through default_convert, which rebuilds a Mapping as
    # ``type(batch)({name: tensor})``; ``Batch(mapping)`` finds the batch whose tensors those are
    # and keeps its epoch, step, index and valid, so the DataLoader yields Batches, not dicts.
    _live = weakref.WeakValueDictionary()

    def __init__(self, *args):
        if len(args) == 1:
            self._rebuild(args[0])
            return
        epoch, step, num_valid, index, valid, fields, offsets = args
        self.epoch = epoch
        self.step = step
        self.num_valid = num_valid
        self.index = index
        self.valid = valid
        self.fields = fields
        self.offsets = offsets
        self._device = None  # a CUDA batch: one of its DeviceFields (record_stream)
        if fields:
            Batch._live[id(next(iter(fields.values())))] = self

    def _rebuild(self, mapping):
        """``Batch({name: tensor})`` from the tensors of a live batch (see ``_live``); any
        other mapping is a TypeError (torch then falls back to a dict)."""
        values = list(mapping.values()) if isinstance(mapping, collections.abc.Mapping) else []
        source = Batch._live.get(id(values[0])) if values else None
        if source is None or list(mapping) != list(source.fields) or any(
                mapping[n] is not t for n, t in source.fields.items()):
            raise TypeError("Batch(mapping) takes the tensors of a batch a loader yielded; "
                            "use the loader's batches")
        Batch.__init__(self, source.epoch, source.step, source.num_valid, source.index,
                       source.valid, dict(mapping), source.offsets)
        self._device = source._device

    def __getitem__(self, name):
        return self.fields[name]

    def __iter__(self):
        return iter(self.fields)

    def __len__(self):
        """The number of fields (a Mapping's length); the batch size is ``size``."""
        return len(self.fields)

    def __contains__(self, name):
        return name in self.fields

    @property
    def size(self):
        """B, the slots of this batch (padding included; ``num_valid`` of them are samples)."""
        return len(self.index)

    def to(self, device, non_blocking=False, **kwargs):
        """A Batch whose fields, ``index``, ``valid`` and ``offsets`` are ``tensor.to(device,
        non_blocking=non_blocking, **kwargs)`` (torch tensors only; ``tensors="numpy"`` batches
        raise TypeError). Not collective; the source batch stays valid. ``non_blocking=True``
        from the loader's pinned ring (a CUDA device chosen) overlaps the copy with compute, as
        ``tensor.to`` does."""
        if not hasattr(self.index, "to"):
            raise TypeError("Batch.to: this batch holds numpy arrays (tensors='numpy'); "
                            "use tensors='torch'")

        def move(t):
            return t.to(device, non_blocking=non_blocking, **kwargs)

        return Batch(self.epoch, self.step, self.num_valid, move(self.index), move(self.valid),
                     {n: move(t) for n, t in self.fields.items()},
                     {n: move(t) for n, t in self.offsets.items()})

    def record_stream(self, stream):
        """Not collective; for a CUDA batch: makes ``stream`` (a ``torch.cuda.Stream``, an
        object with ``cuda_stream`` or ``ptr``, or a cudaStream_t int; 0: the legacy default
        stream) wait for the batch's copy (no host wait) and keeps the batch's device block
        until the work queued on ``stream`` when the batch's last tensor is gone is done, as
        ``Tensor.record_stream`` (every field at once; the stream must outlive that point).
        Needed only to read the batch on a stream other than the one current at ``next()``.
        No-op for a host batch. Raises TypeError / ValueError naming ``stream=``,
        ``mpistage.CudaError``."""
        handle = stream_handle(stream, "stream")
        if self._device is not None:
            self._device.use_on_stream(handle or 1)  # DLPack's 1: the legacy default stream

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in self.fields.items())
        return (f"Batch(epoch={self.epoch}, step={self.step}, size={self.size}, "
                f"num_valid={self.num_valid}, {shapes})")


def make_batch(raw, names, tensors, dtypes=None):
    """A Batch from the extension's tuple (see bindings.hpp, batch_to_python); ``dtypes``: the
    fields' dtype names (needed for batches on a CUDA device)."""
    epoch, step, num_valid, index, valid, arrays, offsets, device = raw
    if device >= 0:
        # Fields in the loader's device memory, as DLPack capsules: CUDA tensors without a
        # copy (tensors="numpy" never reaches here: Loader stages on the CPU for it). DLPack
        # 0.6 types (to_legacy_dtypes): booleans come as uint8 and are viewed back; unsigned
        # types wider than 8 bits stay the signed type of the same width.
        torch = _torch_module()
        from torch.utils.dlpack import from_dlpack
        # from_dlpack calls each DeviceField's __dlpack__(stream=) with torch's current stream
        # (ordered already at next(); this also fences the block there if it changed).
        fields = {}
        for n, a, d in zip(names, arrays, dtypes):
            t = from_dlpack(a)
            fields[n] = t.view(torch.bool) if d == "bool" else t
        batch = Batch(epoch, step, num_valid, torch.from_numpy(index), torch.from_numpy(valid),
                      fields,
                      {n: torch.from_numpy(o) for n, o in zip(names, offsets) if o is not None})
        batch._device = arrays[0] if arrays else None
        return batch
    if tensors == "torch":
        convert = _torch_module().from_numpy
        index = convert(index)
        valid = convert(valid)
        arrays = [convert(a) for a in arrays]
        offsets = [None if o is None else convert(o) for o in offsets]
    fields = dict(zip(names, arrays))
    offs = {n: o for n, o in zip(names, offsets) if o is not None}
    return Batch(epoch, step, num_valid, index, valid, fields, offs)
