"""Torch's conventions on the Python module (issue 41), one test each, at 1-3 ranks (equal
steps and the dropped remainder depend on the world size): Batch as a Mapping with .to(),
set_epoch + iter + len on the Loader, the Stateful protocol, shuffle=True/False and shuffle
"global" alone, every argument validated by its Python name, the dropped remainder reported
once, the DataLoader adapter's batch_size mistake named. No pybind11 message may reach a user:
each error test checks that its text holds none."""
import collections.abc
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data
from conftest import COMM, TIMEOUT, gather_ids, same_on_every_rank

import mpistage

N = 103
PYBIND11_TEXTS = ("Unable to cast", "incompatible function arguments", "pybind11")


def load(source, **kw):
    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("device", "cpu")
    return mpistage.Loader(source, **kw)


def no_pybind11(text):
    assert not any(t in text for t in PYBIND11_TEXTS), text


def test_batch_is_a_mapping_of_fields(small_h5):
    loader = load(mpistage.open_source(small_h5, fields=["x", "y"]), batch_size=5,
                  remainder="mask")
    batch = next(iter(loader.epoch(0)))
    assert isinstance(batch, collections.abc.Mapping)
    assert list(batch) == ["x", "y"] and list(batch.keys()) == ["x", "y"]
    assert len(batch) == 2 and "x" in batch and "valid" not in batch and "index" not in batch
    assert [k for k, _ in batch.items()] == ["x", "y"]
    assert all(isinstance(v, torch.Tensor) for v in batch.values())
    assert dict(batch)["y"] is batch["y"]
    # valid and index are attributes describing the slots
    assert batch.valid.dtype == torch.bool and batch.index.dtype == torch.int64
    assert batch.size == 5 and batch["x"].shape == (5, 3)
    # the content is what the writer put there: y = id, x = id * 10 + column
    v = batch.valid
    assert torch.equal(batch["y"][v], batch.index[v])
    moved = batch.to("cpu", non_blocking=True)
    assert isinstance(moved, mpistage.Batch) and list(moved) == ["x", "y"]
    assert torch.equal(moved["x"], batch["x"]) and torch.equal(moved.valid, batch.valid)
    assert moved.step == batch.step and moved.num_valid == batch.num_valid
    as_double = batch.to(torch.float64)  # any tensor.to() argument
    assert as_double["x"].dtype == torch.float64
    del batch, moved, as_double
    loader.close()


@pytest.mark.parametrize("remainder", ["mask", "drop"])
def test_set_epoch_iter_and_len(small_h5, remainder):
    loader = load(mpistage.open_source(small_h5), batch_size=4, shuffle=True, seed=3,
                  remainder=remainder)
    assert same_on_every_rank(len(loader))
    orders = {}
    for epoch in (0, 1, 0):  # set_epoch chooses; the same epoch gives the same order
        loader.set_epoch(epoch)
        ids, steps = [], 0
        for batch in loader:
            steps += 1
            assert batch.epoch == epoch
            ids.extend(batch.index[batch.valid].tolist())
        assert steps == len(loader) and same_on_every_rank(steps)
        everyone = gather_ids(ids)
        assert len(np.unique(everyone)) == len(everyone)
        if remainder == "mask":
            assert np.array_equal(np.sort(everyone), np.arange(N))
        if epoch in orders:
            assert orders[epoch] == ids
        orders[epoch] = ids
    assert orders[0] != orders[1]
    # without set_epoch, each iteration takes the next epoch
    assert next(iter(loader)).epoch == 1
    loader.close()


def test_state_dict_and_load_state_dict(small_h5):
    source = mpistage.open_source(small_h5)
    first = load(source, batch_size=4, sharding="global", shuffle="global", seed=5,
                 remainder="mask")
    first.set_epoch(2)
    seen = []
    it = iter(first)
    for _ in range(3):
        batch = next(it)
        seen.extend(batch.index[batch.valid].tolist())
    saved = first.state_dict()
    assert saved == first.state() and saved["epoch"] == 2
    del batch, it
    first.close()
    # a fresh loader takes the state through the Stateful protocol and yields the rest
    second = load(source, batch_size=4, sharding="global", shuffle="global", seed=5,
                  remainder="mask")
    second.load_state_dict(saved)
    rest = []
    for batch in second:
        assert batch.epoch == 2
        rest.extend(batch.index[batch.valid].tolist())
    everyone = np.sort(gather_ids(seen + rest))
    assert np.array_equal(everyone, np.arange(N))
    with pytest.raises(TypeError) as bad:
        second.load_state_dict("not a dict")
    assert "state_dict=" in str(bad.value)
    no_pybind11(str(bad.value))
    del batch
    second.close()


def test_shuffle_bools_and_global_alone(small_h5):
    source = mpistage.open_source(small_h5)

    def order(**kw):
        loader = load(source, batch_size=4, seed=9, remainder="mask", **kw)
        ids = [i for b in loader.epoch(0) for i in b.index[b.valid].tolist()]
        loader.close()
        return ids

    # True is the CLI's default shuffle: "global" (which alone implies sharding "global")
    assert order(shuffle=True) == order(shuffle="global", sharding="global")
    assert order(shuffle="global") == order(shuffle="global", sharding="global")
    # False is "none": each rank's shard in file order
    unshuffled = order(shuffle=False)
    assert unshuffled == order(shuffle="none") and unshuffled == sorted(unshuffled)
    # an explicit byte_range with a global shuffle is still refused, naming both
    with pytest.raises(mpistage.ConfigError) as bad:
        load(source, batch_size=4, shuffle="global", sharding="byte_range")
    assert "shuffle" in str(bad.value) and "sharding" in str(bad.value)


@pytest.mark.parametrize("kwargs,name,kind", [
    (dict(shuffle=3), "shuffle=", TypeError),
    (dict(shuffle="sometimes"), "shuffle=", mpistage.ConfigError),
    (dict(token_field="nope", batch_tokens=100), "token_field=", mpistage.ConfigError),
    (dict(token_field=1.5, batch_tokens=100), "token_field=", TypeError),
    (dict(batch_size="8"), "batch_size=", TypeError),
    (dict(batch_size=True), "batch_size=", TypeError),
    (dict(batch_size=-1), "batch_size=", mpistage.ConfigError),
    (dict(timeout="soon"), "timeout=", TypeError),
    (dict(pin_memory="yes"), "pin_memory=", TypeError),
    (dict(sharding=1), "sharding=", TypeError),
    (dict(remainder=None, device=0), "device=", TypeError),
    (dict(tensors="jax"), "tensors=", mpistage.ConfigError),
    (dict(comm="world"), "comm=", TypeError),
    (dict(state=[1]), "state=", TypeError),
    (dict(length_buckets=[1]), "length_buckets", mpistage.ConfigError),
])
def test_arguments_are_validated_by_their_python_name(small_h5, kwargs, name, kind):
    source = mpistage.open_source(small_h5)
    kwargs = dict(kwargs)
    kwargs.setdefault("batch_size", 4)
    with pytest.raises(kind) as bad:
        load(source, **kwargs)
    assert name in str(bad.value), str(bad.value)
    no_pybind11(str(bad.value))
    assert same_on_every_rank(str(bad.value))


def test_open_source_and_epoch_arguments(small_h5):
    for kwargs, name, kind in [(dict(format="csv"), "format=", mpistage.ConfigError),
                               (dict(on_corrupt=1), "on_corrupt=", TypeError),
                               (dict(fields=[1]), "fields=", TypeError)]:
        with pytest.raises(kind) as bad:
            mpistage.open_source(small_h5, **kwargs)
        assert name in str(bad.value)
        no_pybind11(str(bad.value))
    with pytest.raises(TypeError) as bad:
        mpistage.Loader("train.h5", batch_size=4)
    assert "source=" in str(bad.value)
    loader = load(mpistage.open_source(small_h5), batch_size=4)
    for kwargs, name, kind in [(dict(epoch=-1), "epoch=", mpistage.ConfigError),
                               (dict(epoch="0"), "epoch=", TypeError),
                               (dict(epoch=0, max_steps=2.0), "max_steps=", TypeError)]:
        with pytest.raises(kind) as bad:
            loader.epoch(**kwargs)
        assert name in str(bad.value)
        no_pybind11(str(bad.value))
    with pytest.raises(TypeError) as bad:
        loader.set_epoch(None)
    assert "epoch=" in str(bad.value)
    loader.close()


@pytest.mark.skipif(COMM.size < 2, reason="values that differ between ranks need peers")
def test_messages_name_python_arguments_not_cpp_fields(small_h5):
    source = mpistage.open_source(small_h5)
    with pytest.raises(mpistage.ConfigError) as differ:  # C++ names it plan.seed
        load(source, batch_size=4, seed=COMM.rank)
    text = str(differ.value)
    assert "seed= is '0' on rank 0" in text and "plan." not in text, text
    assert same_on_every_rank(text)
    loader = load(source, batch_size=4)
    with pytest.raises(mpistage.ConfigError) as early:  # C++ names EpochOptions::max_steps
        loader.epoch(0, max_steps=COMM.rank + 1)
    text = str(early.value)
    assert "max_steps=" in text and "Epoch.request_stop()" in text, text
    assert "EpochOptions::" not in text and "EpochRange::" not in text
    assert same_on_every_rank(text)
    loader.close()


def test_dropped_remainder_is_reported_once(small_h5):
    source = mpistage.open_source(small_h5)
    batch = 4
    world = COMM.size
    expected = N % (batch * world)  # the writer's N against a step of the whole world
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = load(source, batch_size=batch, remainder="drop", sharding="global")
        for e in range(2):
            for _ in loader.epoch(e):
                pass
    reports = [w for w in caught if "remainder='drop'" in str(w.message)]
    if COMM.rank == 0 and expected:
        assert len(reports) == 1, [str(w.message) for w in caught]
        assert f"leaves {expected} of {N} samples" in str(reports[0].message)
    else:
        assert not reports
    assert loader.totals["dropped_samples"] == expected
    loader.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load(source, batch_size=batch, remainder="mask").close()
    assert not [w for w in caught if "remainder" in str(w.message)]


def test_dataloader_batch_size_mistake_is_named(small_h5):
    loader = load(mpistage.open_source(small_h5), batch_size=4)
    data = torch.utils.data.DataLoader(mpistage.LoaderDataset(loader), batch_size=8)
    with pytest.raises(mpistage.ConfigError) as bad:
        for _ in data:
            pass
    assert "use batch_size=None: the loader already batches" in str(bad.value)
    assert "prefetch" not in str(bad.value)
    # the right call works on the same loader (no epoch was started by the refused one)
    steps = 0
    for batch in torch.utils.data.DataLoader(mpistage.LoaderDataset(loader), batch_size=None):
        # torch rebuilds every Mapping item; it stays a Batch with its slots described
        assert isinstance(batch, mpistage.Batch) and batch.step == steps
        assert batch.valid.shape == (4,)
        steps += 1
    assert steps == len(loader)
    loader.close()
