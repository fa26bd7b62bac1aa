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
