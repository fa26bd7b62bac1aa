"""The Loader from Python at 1-4 ranks: exactly once, equal steps, errors on every rank, resume
at another world size, zero-copy tensors that outlive the loader's step, plain-data state."""
import json

import numpy as np
import pytest
import torch
from conftest import COMM, TIMEOUT, gather_ids, same_on_every_rank

import mpistage

N = 103


def load(source, **kw):
    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("device", "cpu")
    return mpistage.Loader(source, **kw)


CHUNKS = dict(chunk_samples=4, window_chunks=2)  # shuffle="chunks": many windows at N = 103


@pytest.mark.parametrize("sharding,shuffle", [("byte_range", "none"), ("byte_range", "local"),
                                              ("global", "global"), ("global", "chunks")])
@pytest.mark.parametrize("remainder", ["mask", "pad", "drop"])
def test_exactly_once_and_equal_steps(small_h5, sharding, shuffle, remainder):
    source = mpistage.open_source(small_h5, fields=["x", "y"])
    assert source.num_samples == N
    loader = load(source, batch_size=5, sharding=sharding, shuffle=shuffle, seed=7,
                  remainder=remainder, **(CHUNKS if shuffle == "chunks" else {}))
    if shuffle == "chunks":
        assert "chunks of 4 samples" in loader.stats["shuffle_note"]
    for epoch in range(2):
        ids, steps = [], 0
        batches = loader.epoch(epoch)
        for batch in batches:
            steps += 1
            assert batch.step == steps - 1 and batch.epoch == epoch
            assert isinstance(batch["x"], torch.Tensor) and batch["x"].dtype == torch.float32
            assert batch["x"].shape == (5, 3) and batch["y"].dtype == torch.int64
            v = batch.valid
            assert v.dtype == torch.bool and int(v.sum()) == batch.num_valid
            # the content is the sample the index names (known answer of the writer)
            assert torch.equal(batch["y"][v], batch.index[v])
            expect = batch.index[v][:, None].float() * 10 + torch.arange(3).float()
            assert torch.equal(batch["x"][v], expect)
            if remainder == "mask":
                assert torch.all(batch.index[~v] == -1)
            ids.extend(batch.index[v].tolist())
        assert steps == len(batches) and same_on_every_rank(steps)
        everyone = np.sort(gather_ids(ids))
        if remainder == "drop":
            assert len(np.unique(everyone)) == len(everyone) and len(everyone) <= N
            assert N - len(everyone) < 5 * COMM.size
        else:
            uniq = np.unique(everyone)
            assert np.array_equal(uniq, np.arange(N))
            if remainder == "mask":
                assert len(everyone) == N
    assert loader.stats["batches"] == 2 * steps


def test_errors_are_raised_on_every_rank(small_h5, workdir):
    messages = []
    with pytest.raises(mpistage.Error) as missing:
        mpistage.open_source(workdir + "/does-not-exist.h5")
    messages.append(str(missing.value))
    assert "does-not-exist.h5" in str(missing.value)
    source = mpistage.open_source(small_h5)
    with pytest.raises(mpistage.ConfigError) as bad:
        load(source, batch_size=0)
    assert "batch_size" in str(bad.value)
    with pytest.raises(mpistage.ConfigError) as unknown:
        load(source, batch_sise=4)
    assert "batch_sise" in str(unknown.value)
    if COMM.size > 1:
        # options that differ between ranks: the same ConfigError everywhere, never a hang
        with pytest.raises(mpistage.ConfigError) as differ:
            load(source, batch_size=4, seed=COMM.rank)
        messages.append(str(differ.value))
    assert same_on_every_rank(messages)
    assert issubclass(mpistage.ConfigError, mpistage.Error)
    assert issubclass(mpistage.Error, RuntimeError)


@pytest.mark.parametrize("shuffle", ["global", "chunks", "chunks-budget"])
def test_resume_at_another_world_size(small_h5, shuffle):
    """Consume 3 steps at W ranks, save the state as JSON text, restore it on a communicator of
    W - 1 ranks (W at 1 rank): consumed + rest is every sample exactly once (chunks: in the
    order made for W, order_world_size; chunks-budget: with budget batches of 7 samples)."""
    source = mpistage.open_source(small_h5)
    if shuffle == "chunks-budget":
        opts = dict(batch_bytes=7 * 20, sharding="global", shuffle="chunks", seed=11, **CHUNKS)
    else:
        opts = dict(batch_size=4, sharding="global", shuffle=shuffle, seed=11, remainder="mask",
                    **(CHUNKS if shuffle == "chunks" else {}))
    loader = load(source, **opts)
    consumed = []
    epoch = loader.epoch(0, max_steps=3)
    for batch in epoch:
        consumed.extend(batch.index[batch.valid].tolist())
    state = json.loads(json.dumps(loader.state()))  # plain data, survives JSON
    assert state["steps_consumed"] == 3 and state["world_size"] == COMM.size
    if shuffle != "global":
        assert state["order_world_size"] == COMM.size and state["chunk_samples"] == 4
    del epoch, loader
    smaller = COMM.Split(0 if COMM.rank < max(COMM.size - 1, 1) else 1, COMM.rank)
    rest = []
    if COMM.rank < max(COMM.size - 1, 1):
        sub_source = mpistage.open_source(small_h5, comm=smaller)
        resumed = mpistage.Loader.restore(sub_source, state, comm=smaller, timeout=TIMEOUT,
                                          device="cpu", **opts)
        for batch in resumed.epoch(0):
            rest.extend(batch.index[batch.valid].tolist())
        del resumed
    smaller.Free()
    everyone = np.sort(np.concatenate([gather_ids(consumed), gather_ids(rest)]))
    assert np.array_equal(everyone, np.arange(N))


def test_tensors_outlive_the_step_and_the_loader(small_h5):
    source = mpistage.open_source(small_h5)
    loader = load(source, batch_size=4, prefetch=3)
    kept = None
    for batch in loader.epoch(0):
        if kept is None:
            kept = (batch["x"], batch["x"].clone(), batch.index.clone())
    del batch, loader
    x, copy, index = kept
    assert torch.equal(x, copy)  # its slot was not refilled while the tensor lived
    valid = index >= 0
    assert torch.equal(x[valid][:, 0], index[valid].float() * 10)


def test_numpy_batches_and_stats(small_h5):
    source = mpistage.open_source(small_h5)
    loader = load(source, batch_size=8, tensors="numpy", stage="memory")
    n = 0
    for batch in loader.epoch(0):
        assert isinstance(batch["y"], np.ndarray)
        n += batch.num_valid
    stats = loader.stats
    assert stats["tier"] == "memory" and stats["valid_samples"] == n
    assert COMM.allreduce(n) <= N and loader.totals["valid_samples"] == COMM.allreduce(n)


@pytest.mark.parametrize("mode", ["off", "on", "auto"])
def test_two_phase_modes(small_h5, mode):
    """two_phase takes "off", "on" or "auto"; stats say whether the epochs read in two phases
    (auto: the same decision on every rank, with its note); every sample exactly once."""
    source = mpistage.open_source(small_h5, fields=["x", "y"])
    loader = load(source, batch_size=5, sharding="global", shuffle="global", seed=3,
                  remainder="pad", two_phase=mode)
    stats = loader.stats
    assert stats["two_phase"] == (mode == "on") or mode == "auto"
    assert same_on_every_rank(int(stats["two_phase"]))
    if mode == "auto":
        assert stats["two_phase_note"].startswith(
            "two-phase auto: " + ("on" if stats["two_phase"] else "off"))
    else:
        assert stats["two_phase_note"] == ""
    ids = []
    for batch in loader.epoch(0):
        v = batch.valid
        assert torch.equal(batch["y"][v], batch.index[v])
        ids.extend(batch.index[v].tolist())
    assert np.array_equal(np.unique(gather_ids(ids)), np.arange(N))
    for bad in ("maybe", True):
        with pytest.raises(mpistage.ConfigError):
            load(source, batch_size=5, sharding="global", shuffle="global", two_phase=bad)


@pytest.mark.parametrize("stage", ["none", "memory"])
def test_h5py_booleans_are_bool_fields(workdir, stage):
    """h5py writes numpy.bool_ as an enum (FALSE = 0, TRUE = 1) over int8: a bool field, found
    by the default field list (a string dataset beside it is left out, with a note), read through the pread fast path (contiguous) and through HDF5
    (chunked, gzip), served from the file and from the memory tier; values as h5py wrote them."""
    import os
    n = 61
    path = os.path.join(workdir, "bools.h5")
    ids = np.arange(n)
    flag = ids % 3 == 0
    pair = np.stack([ids % 2 == 0, ids % 5 == 0], axis=1)
    if COMM.rank == 0 and not os.path.exists(path):
        import h5py
        with h5py.File(path, "w") as f:
            f["flag"] = flag
            f.create_dataset("pair", data=pair, chunks=(8, 2), compression="gzip")
            f["y"] = ids.astype(np.int64)
            f["name"] = np.array([b"row%d" % i for i in ids])  # strings: not a field
    COMM.Barrier()
    source = mpistage.open_source(path)
    fields = {f["name"]: f["dtype"] for f in source.fields}
    assert fields == {"flag": "bool", "pair": "bool", "y": "int64"}
    assert len(source.notes) == 1 and "'name' (string" in source.notes[0]
    loader = load(source, batch_size=4, sharding="global", shuffle="global", seed=5,
                  remainder="mask", stage=stage)
    seen = []
    for batch in loader.epoch(0):
        v = batch.valid
        assert batch["flag"].dtype == torch.bool and batch["pair"].dtype == torch.bool
        assert batch["pair"].shape == (4, 2)
        i = batch.index[v].numpy()
        assert np.array_equal(batch["flag"][v].numpy(), flag[i])
        assert np.array_equal(batch["pair"][v].numpy(), pair[i])
        seen.extend(i.tolist())
    assert np.array_equal(np.sort(gather_ids(seen)), ids)


def test_budget_batches(small_h5):
    source = mpistage.open_source(small_h5)
    loader = load(source, batch_bytes=7 * 20, remainder="mask")  # 20 bytes a sample
    ids = []
    for batch in loader.epoch(0):
        assert batch.size <= 7
        ids.extend(batch.index[batch.valid].tolist())
    assert np.array_equal(np.sort(gather_ids(ids)), np.arange(N))


def test_idx_files(workdir):
    """Two IDX files (the Fashion-MNIST format), written here with numpy: one field each."""
    import os
    import struct
    n = 37
    images = (np.arange(n * 16) % 251).astype(np.uint8).reshape(n, 4, 4)
    labels = (np.arange(n) % 10).astype(np.uint8)
    paths = [os.path.join(workdir, "images.idx3"), os.path.join(workdir, "labels.idx1")]
    if COMM.rank == 0:
        with open(paths[0], "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 4, 4) + images.tobytes())
        with open(paths[1], "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + labels.tobytes())
    COMM.Barrier()
    source = mpistage.open_source(paths, format="idx")
    assert source.num_samples == n and len(source.fields) == 2
    names = [f["name"] for f in source.fields]
    loader = load(source, batch_size=4, remainder="mask")
    ids = []
    for batch in loader.epoch(0):
        v = batch.valid
        idx = batch.index[v].numpy()
        assert np.array_equal(batch[names[0]][v].numpy(), images[idx])
        assert np.array_equal(batch[names[1]][v].numpy(), labels[idx])
        ids.extend(idx.tolist())
    assert np.array_equal(np.sort(gather_ids(ids)), np.arange(n))
