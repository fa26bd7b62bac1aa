"""The CLI's checks from Python (issue 41), part 2: Source.close() (collective, reads after it a
ConfigError naming the source) and stop signals (the CLI's --stop-signals machinery): a SIGTERM
to one rank stops every rank at the same step, the state is equal, resume is exactly once;
convert_idx and write_index (the CLI's convert and index commands) against h5py and a framing
parse of the TFRecord written here. Needs peers: 2 ranks (also runs at 1)."""
import os
import signal

import numpy as np
import pytest
from conftest import COMM, TIMEOUT, gather_ids, same_on_every_rank

import mpistage

N = 103


def load(source, **kw):
    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("device", "cpu")
    return mpistage.Loader(source, **kw)


def test_source_close(small_h5):
    source = mpistage.open_source(small_h5)
    loader = load(source, batch_size=4)
    with pytest.raises(mpistage.ConfigError) as busy:
        source.close()  # a loader still reads it
    assert "still open" in str(busy.value) and small_h5 in str(busy.value)
    assert not source.closed
    assert sum(1 for _ in loader.epoch(0)) == len(loader)
    loader.close()
    source.close()
    source.close()  # twice is fine
    assert source.closed and source.num_samples == N and source.paths == [small_h5]
    with pytest.raises(mpistage.ConfigError) as closed:
        load(source, batch_size=4)
    assert "closed" in str(closed.value) and small_h5 in str(closed.value)
    assert same_on_every_rank(str(closed.value))
    with mpistage.open_source(small_h5) as again:  # `with` closes it
        assert again.num_samples == N
    assert again.closed


def test_stop_signal_arguments():
    with pytest.raises(mpistage.ConfigError) as bad:
        mpistage.install_stop_signals("TERM,KILL")
    assert "KILL" in str(bad.value) and "signals=" in str(bad.value)
    assert same_on_every_rank(str(bad.value))
    with pytest.raises(TypeError):
        mpistage.install_stop_signals(1.5)
    assert mpistage.install_stop_signals("none") == []
    assert mpistage.EXIT_STOPPED == 75


def test_sigterm_to_one_rank_stops_all_at_one_step(small_h5):
    assert mpistage.install_stop_signals([signal.SIGUSR1, "TERM"]) == ["USR1", "TERM"]
    source = mpistage.open_source(small_h5)
    loader = load(source, batch_size=2, sharding="global", shuffle="global", seed=3,
                  remainder="mask", prefetch=2)
    epoch = loader.epoch(0)
    seen = []
    for step, batch in enumerate(epoch):
        seen += batch.index[batch.valid].tolist()
        if step == 3 and COMM.rank == COMM.size - 1:
            os.kill(os.getpid(), signal.SIGTERM)  # only the last rank gets it
    steps = step + 1
    assert epoch.stopped and steps < len(loader)
    assert same_on_every_rank(steps)
    assert mpistage.stop_signal() == ("TERM" if COMM.rank == COMM.size - 1 else None)
    state = loader.state_dict()
    assert same_on_every_rank(state)
    loader.close()
    mpistage.clear_stop_request()
    assert not mpistage.stop_requested()
    # resume: the rest of epoch 0, every sample exactly once over both parts and all ranks
    resumed = load(source, state=state, batch_size=2, sharding="global", shuffle="global",
                   seed=3, remainder="mask", prefetch=2)
    rest = []
    for batch in resumed:
        rest += batch.index[batch.valid].tolist()
    ids = np.sort(np.concatenate([gather_ids(seen), gather_ids(rest)]))
    assert np.array_equal(ids, np.arange(N))
    resumed.close()
    mpistage.install_stop_signals("none")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)


def write_idx(path, array):
    """An uncompressed IDX file of a uint8 array (rank 0 writes): magic 0x0000 08 ndim, dims."""
    if COMM.rank == 0:
        with open(path, "wb") as f:
            f.write(bytes([0, 0, 0x08, array.ndim]))
            f.write(np.asarray(array.shape, dtype=">i4").tobytes())
            f.write(array.astype(np.uint8).tobytes())
    COMM.Barrier()
    return path


def test_idx_source_close(workdir):
    images = write_idx(os.path.join(workdir, "close-images-idx3-ubyte"),
                       (np.arange(N * 4) % 251).reshape(N, 2, 2))
    labels = write_idx(os.path.join(workdir, "close-labels-idx1-ubyte"), np.arange(N) % 10)
    source = mpistage.open_source([images, labels], format="idx")
    loader = load(source, batch_size=4, remainder="mask")
    ids = [i for b in loader.epoch(0) for i in b.index[b.valid].tolist()]
    assert np.array_equal(np.sort(gather_ids(ids)), np.arange(N))
    loader.close()
    source.close()  # RawSource::close
    assert source.closed and source.num_samples == N
    with pytest.raises(mpistage.ConfigError) as closed:
        load(source, batch_size=4)
    assert images in str(closed.value)


def test_stats_dict_counts_what_was_yielded(small_h5):
    source = mpistage.open_source(small_h5)
    loader = load(source, batch_size=4, remainder="mask")
    valid = sum(b.num_valid for b in loader.epoch(0))
    stats = loader.stats
    assert stats["batches"] == len(loader) and stats["valid_samples"] == valid
    # x float32 [3] + y int64: 20 bytes a sample; at least the valid ones were read
    assert stats["bytes_read"] >= valid * 20
    assert stats["device"] == "cpu" and stats["h2d_bytes"] == 0 and stats["h2d_seconds"] == 0
    assert sum(COMM.allgather(stats["valid_samples"])) == N
    loader.close()


def write_idx_gz(path, array):
    """An IDX file (big-endian dims, ubyte elements), gzip-compressed, written by rank 0."""
    if COMM.rank == 0:
        import gzip
        import struct
        with gzip.open(path, "wb") as f:
            f.write(bytes([0, 0, 0x08, array.ndim]))
            f.write(struct.pack(">" + "I" * array.ndim, *array.shape))
            f.write(np.ascontiguousarray(array, dtype=np.uint8).tobytes())
    COMM.Barrier()
    return path


def tfrecord_framing(path):
    """(offset, payload + 16) of each record, parsed here from TensorFlow's framing (u64 length,
    masked CRC of it, payload, masked CRC of it), independently of mpistage."""
    import struct
    out = []
    with open(path, "rb") as f:
        data = f.read()
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        out.append((offset, length + 16))
        offset += length + 16
    assert offset == len(data)
    return out


def test_convert_idx_and_write_index(workdir):
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, size=(50, 4, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=50, dtype=np.uint8)
    img = write_idx_gz(os.path.join(workdir, "conv-images.gz"), images)
    lab = write_idx_gz(os.path.join(workdir, "conv-labels.gz"), labels)
    h5 = os.path.join(workdir, "conv.h5")
    mpistage.convert_idx(img, lab, h5)
    if COMM.rank == 0:
        import h5py
        with h5py.File(h5, "r") as f:  # the known answer: h5py against the arrays written
            assert np.array_equal(f["images"][()], images)
            assert np.array_equal(f["labels"][()].astype(np.int64), labels.astype(np.int64))
    COMM.Barrier()
    with mpistage.open_source(h5) as source:
        assert source.num_samples == 50

    tfr = os.path.join(workdir, "conv.tfrecord")
    mpistage.convert_idx(img, lab, tfr, format="tfrecord")
    mpistage.write_index(tfr)
    COMM.Barrier()
    with open(tfr + ".idx") as f:
        index = [tuple(int(v) for v in line.split()) for line in f]
    assert index == tfrecord_framing(tfr) and len(index) == 50
    mpistage.write_index([tfr], [os.path.join(workdir, "other.idx")])
    with open(os.path.join(workdir, "other.idx")) as f:
        assert [tuple(int(v) for v in line.split()) for line in f] == index

    with pytest.raises(mpistage.ConfigError) as directory:
        mpistage.convert_idx(img, lab, workdir)  # a directory, never replaced
    assert workdir in str(directory.value) and "is a directory" in str(directory.value)
    assert same_on_every_rank(str(directory.value))
    with pytest.raises(mpistage.ConfigError) as fmt:
        mpistage.convert_idx(img, lab, h5, format="zip")
    assert "format=" in str(fmt.value)
    with pytest.raises(mpistage.IoError) as missing:
        mpistage.convert_idx(os.path.join(workdir, "absent.gz"), lab, h5)
    assert "absent.gz" in str(missing.value) and same_on_every_rank(str(missing.value))
    with pytest.raises(mpistage.ConfigError) as count:
        mpistage.write_index([tfr], ["a.idx", "b.idx"])
    assert "outputs=" in str(count.value)
