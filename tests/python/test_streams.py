"""Python iterables as mpistage streams at 1-4 ranks: uneven streams end together, every item
once, errors raised on every rank, byte budgets, resume at another world size."""
import numpy as np
import pytest
from mpi4py import MPI
from conftest import COMM, TIMEOUT, gather_ids, same_on_every_rank

import mpistage

FIELDS = [mpistage.Field("value", "int64"), mpistage.Field("payload", "uint8", ragged=True)]


def items(stream, count):
    for i in range(count):
        yield (stream * 1000 + i, bytes([i % 256]) * (1 + i % 7))


def lengths(s):
    return 5 + 13 * s  # unequal streams


def source(num_streams=3, fail_at=None):
    def make(s):
        if fail_at is not None and s == fail_at[0]:
            return _failing(s, fail_at[1])
        return items(s, lengths(s))
    return mpistage.stream_source(FIELDS, make, num_streams, fingerprint="test-streams")


def _failing(s, at):
    for i, item in enumerate(items(s, lengths(s))):
        if i == at:
            raise ValueError(f"camera {s} unplugged")
        yield item


def drain(loader, epoch=0):
    steps, values = 0, []
    for batch in loader.epoch(epoch):
        steps += 1
        values.extend(batch["value"][batch.valid].tolist())
        offs = batch.offsets["payload"]
        for slot in np.nonzero(batch.valid.numpy())[0]:
            n = int(offs[slot + 1] - offs[slot])
            i = int(batch["value"][slot]) % 1000
            assert n == 1 + i % 7
    return steps, values


def expected(num_streams=3):
    return sorted(s * 1000 + i for s in range(num_streams) for i in range(lengths(s)))


@pytest.mark.parametrize("sharding", ["chunk", "hash", "source"])
@pytest.mark.parametrize("remainder", ["rebalance", "mask"])
def test_uneven_streams_end_together_exactly_once(sharding, remainder):
    loader = mpistage.Loader(source(), sharding=sharding, remainder=remainder,
                             chunk_size=4, batch_size=5, timeout=TIMEOUT)
    steps, values = drain(loader)
    assert same_on_every_rank(steps)
    assert sorted(gather_ids(values).tolist()) == expected()


def test_byte_budget():
    loader = mpistage.Loader(source(), max_batch_samples=64, batch_bytes=40, timeout=TIMEOUT)
    epoch = loader.epoch(0)
    for batch in epoch:
        payload = int(batch.offsets["payload"][-1]) + 8 * batch.size
        assert payload <= 40 or epoch.last_oversize
    assert loader.stats["batches"] == epoch.steps_done
    with pytest.raises(TypeError, match="known only at its end"):
        len(loader)
    # A file-only option is refused by name, never ignored.
    with pytest.raises(mpistage.ConfigError, match="shuffle"):
        mpistage.Loader(source(), shuffle=True, timeout=TIMEOUT)


def test_errors_in_one_rank_stream_on_every_rank():
    # stream 1 fails at its item 3: under "source" sharding only its owner reads it
    loader = mpistage.Loader(source(fail_at=(1, 3)), sharding="source", batch_size=2,
                             timeout=TIMEOUT)
    with pytest.raises(mpistage.Error) as err:
        drain(loader)
    message = str(err.value)
    assert "unplugged" in message and "stream 1" in message
    assert same_on_every_rank(message)


def test_wrong_item_shape_is_a_format_error():
    fields = [mpistage.Field("pair", "float32", (2,))]
    bad = mpistage.stream_source(fields, lambda s: iter([(np.ones(3),)]), 1, fingerprint="bad")
    loader = mpistage.Loader(bad, timeout=TIMEOUT)
    with pytest.raises(mpistage.Error) as err:
        drain(loader)
    assert "field 'pair' has 12 bytes" in str(err.value)
    assert same_on_every_rank(str(err.value))


def test_resume_at_another_world_size():
    opts = dict(sharding="chunk", chunk_size=3, batch_size=4, timeout=TIMEOUT)
    loader = mpistage.Loader(source(), **opts)
    consumed = []
    it = loader.epoch(0)
    for _ in range(2):
        batch = next(it)
        consumed.extend(batch["value"][batch.valid].tolist())
    state = loader.state()
    assert state["steps_consumed"] == 2
    color = 0 if COMM.rank < max(COMM.size - 1, 1) else 1
    smaller = COMM.Split(color, COMM.rank)
    rest = []
    if color == 0:
        def make(s):
            return items(s, lengths(s))
        src = mpistage.stream_source(FIELDS, make, 3, fingerprint="test-streams")
        resumed = mpistage.Loader(src, comm=smaller, state=state, **opts)
        _, rest = drain(resumed)
        del resumed
    smaller.Free()
    everyone = sorted(gather_ids(consumed).tolist() + gather_ids(rest).tolist())
    assert everyone == expected()


@pytest.mark.parametrize("sharding", ["chunk", "hash", "source"])
def test_state_saved_by_rank_zero_alone(sharding):
    """state() is local, as Loader's: rank 0 saves while the others go on (no hang), and the
    state, handed to every rank, resumes exactly once."""
    opts = dict(sharding=sharding, chunk_size=3, batch_size=4, timeout=TIMEOUT)
    loader = mpistage.Loader(source(), **opts)
    consumed = []
    it = loader.epoch(0)
    for _ in range(2):
        batch = next(it)
        consumed.extend(batch["value"][batch.valid].tolist())
    state = loader.state() if COMM.rank == 0 else None
    for _ in range(2):  # the job goes on past the save
        next(it, None)
    del it, loader
    state = COMM.bcast(state, root=0)
    assert state["steps_consumed"] == 2
    resumed = mpistage.Loader(source(), state=state, **opts)
    _, rest = drain(resumed)
    everyone = sorted(gather_ids(consumed).tolist() + gather_ids(rest).tolist())
    assert everyone == expected()


@pytest.mark.parametrize("sharding", ["chunk", "hash", "source"])
def test_io_threads_give_the_batches_of_the_callers_thread(sharding):
    """io_threads read the iterables ahead (on I/O threads, under the GIL); the batches are
    the ones read inside next(), slot for slot."""
    def run(**extra):
        loader = mpistage.Loader(source(), sharding=sharding, chunk_size=3, batch_size=4,
                                 timeout=TIMEOUT, **extra)
        batches = [batch.index.tolist() for batch in loader.epoch(0)]
        return batches, loader.stats
    plain, plain_stats = run()
    threaded, stats = run(io_threads=2, prefetch=3)
    assert threaded == plain
    assert plain_stats["io_threads"] == 0
    # Per rank: under source sharding a rank may read no stream (then it starts no thread).
    assert COMM.allreduce(stats["io_threads"], op=MPI.MAX) >= 1
    ids = [i for b in threaded for i in b if i >= 0]
    assert sorted(gather_ids(ids).tolist()) == sorted(
        (s << 40) | p for s in range(3) for p in range(lengths(s)))
