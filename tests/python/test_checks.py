"""The CLI's checks from Python (issue 41) at 1-3 ranks (exactly once depends on the world
size): Loader(verify=True) / epoch(e, verify=True) run `mpistage stage --verify`'s own
exactly-once count and verdict."""
import pytest
from conftest import COMM, TIMEOUT, same_on_every_rank

import mpistage

N = 103


def load(source, **kw):
    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("device", "cpu")
    return mpistage.Loader(source, **kw)


@pytest.mark.parametrize("sharding,shuffle", [("byte_range", "local"), ("global", "global")])
@pytest.mark.parametrize("remainder", ["mask", "pad", "drop"])
def test_verify_every_epoch(small_h5, sharding, shuffle, remainder):
    loader = load(mpistage.open_source(small_h5), batch_size=5, sharding=sharding,
                  shuffle=shuffle, remainder=remainder, verify=True)
    for e in range(2):
        epoch = loader.epoch(e)
        valid = sum(b.num_valid for b in epoch)
        report = epoch.verified
        assert report["ok"] and report["epoch"] == e
        assert report["duplicates"] == 0 and report["missing"] == 0
        assert report["batches"] == [len(loader)] * COMM.size
        assert report["valid"][COMM.rank] == valid
        # every sample once, except the remainder drop leaves out (fewer than a world step)
        kept = N if remainder != "drop" else N - loader.totals["dropped_samples"]
        assert report["expected"] == kept and sum(report["valid"]) == kept
        assert same_on_every_rank(report)
    loader.close()


def test_verify_an_epoch_ended_early(small_h5):
    loader = load(mpistage.open_source(small_h5), batch_size=4, remainder="mask")
    epoch = loader.epoch(0, max_steps=3, verify=True)
    assert sum(1 for _ in epoch) == 3
    assert epoch.verified["ok"] and sum(epoch.verified["valid"]) == 3 * 4 * COMM.size
    plain = loader.epoch(1)  # verify off unless asked
    for _ in plain:
        pass
    assert plain.verified is None
    with pytest.raises(TypeError) as bad:
        loader.epoch(2, verify="yes")
    assert "verify=" in str(bad.value)
    loader.close()


def independent_figure(per_rank_batches, n):
    """The shuffle-quality figure recomputed here from every rank's yielded ids (its definition
    in docs/shuffle.md), to check the one the loader reports."""
    blocks = min(256, n)
    batches = distinct = expected = jumps = pairs = 0
    for rank_batches in per_rank_batches:
        last = None
        for ids in rank_batches:
            for i in ids:
                if last is not None:
                    jumps += abs(i - last) / n
                    pairs += 1
                last = i
            if not ids:
                continue
            batches += 1
            distinct += len({i * blocks // n for i in ids})
            expected += blocks * (1 - (1 - 1 / blocks) ** len(ids))
    return {"blocks": blocks, "batches": batches, "blocks_per_batch": distinct / batches,
            "full_shuffle_blocks_per_batch": expected / batches, "mean_jump": jumps / pairs}


@pytest.mark.parametrize("shuffle", ["none", "global", "chunks"])
def test_shuffle_quality_is_the_figure_of_the_ids_yielded(workdir, shuffle):
    from conftest import write_h5
    import os
    n = 2000
    path = write_h5(os.path.join(workdir, f"quality-{shuffle}.h5"), n)
    extra = {"chunk_samples": 25, "window_chunks": 4} if shuffle == "chunks" else {}
    loader = load(mpistage.open_source(path), batch_size=16, sharding="global",
                  shuffle=shuffle, remainder="mask", shuffle_quality=True, **extra)
    epoch = loader.epoch(1)
    mine = []
    for b in epoch:
        index, valid = b.index.tolist(), b.valid.tolist()
        mine.append([i for i, ok in zip(index, valid) if ok])
        assert epoch.shuffle_quality is None  # known at the end
    figure = epoch.shuffle_quality
    assert same_on_every_rank(figure)
    want = independent_figure(COMM.allgather(mine), n)
    assert figure["blocks"] == want["blocks"] and figure["batches"] == want["batches"]
    for key in ("blocks_per_batch", "full_shuffle_blocks_per_batch", "mean_jump"):
        assert figure[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
    assert figure["full_shuffle_mean_jump"] == pytest.approx(1 / 3)
    if shuffle == "none":  # contiguous ids: one or two blocks a batch, tiny jumps
        assert figure["blocks_per_batch"] < 3 and figure["mean_jump"] < 0.01
    if shuffle == "global":  # as a full shuffle's expectation
        assert figure["blocks_per_batch"] == pytest.approx(
            figure["full_shuffle_blocks_per_batch"], rel=0.1)
    if shuffle == "chunks":
        assert figure["chunk_samples"] == 25 and "chunks_per_batch" in figure
        assert figure["chunks_per_batch"] <= 2 * 4 + 2  # a batch draws from one or two windows
    else:
        assert "chunk_samples" not in figure
    plain = loader.epoch(2, shuffle_quality=False)
    for _ in plain:
        pass
    assert plain.shuffle_quality is None
    with pytest.raises(TypeError) as bad:
        loader.epoch(3, shuffle_quality=1)
    assert "shuffle_quality=" in str(bad.value)
    loader.close()
