"""Signals and exceptions from Python (issue 41) at 2 ranks (only a peer is needed): Ctrl-C on a
rank blocked in next() raises KeyboardInterrupt there within a second while its peer gets the
loader's agreed error (no watchdog abort: the watchdog here is 60 s, the test ends in seconds);
Ctrl-C in a stream Loader's next() likewise, and a rank that catches it goes on with no batch
lost or repeated;
an exception raised in a user's stream iterable keeps its type on the rank where it happened
(the agreed mpistage.Error raised there is chained from it), the agreed error on the others."""
import os
import traceback
import signal
import threading
import time

import pytest
from conftest import COMM, TIMEOUT, same_on_every_rank

import mpistage

pytestmark = pytest.mark.skipif(COMM.size != 2, reason="one interrupted rank and one peer")


def test_ctrl_c_in_next_raises_keyboard_interrupt_and_peers_get_the_agreed_error(small_h5):
    # The source is closed explicitly at the end: this test leaves different exceptions (and
    # tracebacks, which hold frames) on the two ranks, so their last references go at different
    # times; a collective close must not wait for that.
    source = mpistage.open_source(small_h5)
    loader = mpistage.Loader(source, batch_size=2, prefetch=2, timeout=TIMEOUT, device="cpu")
    epoch = iter(loader.epoch(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where the launcher ignored it
    COMM.Barrier()
    if COMM.rank == 0:
        # rank 1 sleeps before its first next(): rank 0 runs ahead until it waits for it
        sent = []

        def interrupt():
            time.sleep(0.5)  # rank 0 is blocked in next() by then
            sent.append(time.perf_counter())
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt).start()
        with pytest.raises(KeyboardInterrupt):
            for _ in range(1000):
                next(epoch)
        latency = time.perf_counter() - sent[0]
        assert latency < 1.0, f"KeyboardInterrupt {latency:.2f} s after SIGINT"
        # the interrupted rank leaves the loader; the peer meets that in its next()
        with pytest.raises(mpistage.ConfigError) as agreed:
            loader.close()
    else:
        time.sleep(3.0)
        t0 = time.perf_counter()
        with pytest.raises(mpistage.ConfigError) as agreed:
            for _ in range(1000):
                next(epoch)
        assert time.perf_counter() - t0 < 10.0  # far below the watchdog's 60 s
    text = str(agreed.value)
    assert "rank 0" in text and "rank 1" in text, text
    assert same_on_every_rank(text)
    del epoch
    loader.close()
    source.close()


def test_ctrl_c_in_stream_next_raises_keyboard_interrupt_and_loses_no_batch():
    fields = [mpistage.Field("value", "int64")]
    lengths = [301, 157]  # unequal streams

    def make(s):
        return ({"value": s * 1000 + i} for i in range(lengths[s]))

    source = mpistage.stream_source(fields, make, num_streams=2, fingerprint="signals-stream-v1")
    loader = mpistage.Loader(source, sharding="chunk", chunk_size=8, batch_size=4,
                             timeout=TIMEOUT, tensors="numpy")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    values, steps, interrupted = [], 0, False
    batches = iter(loader.epoch(0))
    COMM.Barrier()
    if COMM.rank == 0:
        sent = []

        def interrupt():
            time.sleep(0.5)  # rank 0 is blocked in next(), waiting for rank 1, by then
            sent.append(time.perf_counter())
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt).start()
    else:
        time.sleep(3.0)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            break
        except KeyboardInterrupt:
            # caught: the interrupted step's batch is the next one
            latency = time.perf_counter() - sent[0]
            assert latency < 1.0, f"KeyboardInterrupt {latency:.2f} s after SIGINT"
            interrupted = True
            continue
        steps += 1
        values.extend(int(v) for v, ok in zip(batch["value"], batch.valid) if ok)
    assert interrupted == (COMM.rank == 0)
    assert same_on_every_rank(steps)
    every = sorted(v for part in COMM.allgather(values) for v in part)
    assert every == sorted(s * 1000 + i for s in range(2) for i in range(lengths[s]))


class SensorFault(Exception):
    """The user's own exception type."""


def test_stream_exception_keeps_its_type_where_it_happened():
    fields = [mpistage.Field("value", "int64")]

    def make(s):
        def items():
            for i in range(50):
                if s == 1 and i == 7:
                    raise SensorFault(f"sensor {s} broke at {i}")
                yield {"value": i}
        return items()

    source = mpistage.stream_source(fields, make, num_streams=2, fingerprint="signals-v1")
    loader = mpistage.Loader(source, sharding="source", batch_size=4, timeout=TIMEOUT)
    with pytest.raises(mpistage.Error) as agreed:  # the same type on every rank
        for _ in loader.epoch(0):
            pass
    original = agreed.value.__cause__
    if COMM.rank == 1:  # stream 1 is read by rank 1 (sharding="source")
        # the user's exception, its type and its traceback (into make's generator) kept
        assert isinstance(original, SensorFault) and "broke at 7" in str(original)
        assert "items" in [f.name for f in traceback.extract_tb(
            original.__traceback__)]
    else:
        assert original is None
    text = str(agreed.value)
    assert "SensorFault" in text and "stream 1" in text
    assert same_on_every_rank(text)
