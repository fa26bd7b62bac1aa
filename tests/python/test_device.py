"""Batches on a CUDA device reach Python as DLPack capsules over the staged device memory, on the
CUDA test double (tests/fake_cuda, preloaded: its "device memory" is host memory, so the bytes
can be read back here without a GPU). Before this, the extension built numpy arrays over the
host pointer of a CUDA batch, which is null (found reading the code for an H200 run). Known
answers: h5py's x = id * 10 + column."""
import ctypes
import os

import numpy as np
import pytest
from conftest import COMM, TIMEOUT, gather_ids  # noqa: F401 (workdir, small_h5: fixtures)

import mpistage

FAKE = ctypes.CDLL(None)  # the preloaded double's control calls (fake_cuda.h)
if not hasattr(FAKE, "mpistage_fake_cuda_active") or FAKE.mpistage_fake_cuda_active() != 1:
    pytest.skip("the CUDA test double is not preloaded (LD_PRELOAD, tests/python/CMakeLists.txt)",
                allow_module_level=True)

ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
ctypes.pythonapi.PyCapsule_SetName.restype = ctypes.c_int
ctypes.pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


class DLTensor(ctypes.Structure):  # DLPack's DLTensor, as include/mpistage/dlpack.hpp
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]


def dl_tensor(capsule):
    assert ctypes.pythonapi.PyCapsule_GetName(capsule) == b"dltensor"
    return DLTensor.from_address(ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor"))


@pytest.fixture
def torch_sees_a_gpu(monkeypatch):
    """The double stands for a GPU; torch (CPU-only in CI) is told it has one."""
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_cuda_fields_are_dlpack_capsules_over_the_staged_bytes(small_h5, torch_sees_a_gpu):
    loader = mpistage.Loader(mpistage.open_source(small_h5), batch_size=6, sharding="global",
                             shuffle="global", remainder="mask", timeout=TIMEOUT, device="cuda")
    assert loader.stats["device"].startswith("cuda")
    ids = []
    for epoch in range(2):
        ids = []
        it = loader.epoch(epoch)
        for _ in range(it.steps):
            _, _, num_valid, index, valid, fields, offsets, device = it._core.next()
            assert device == 0
            assert offsets == [None, None]
            assert [f.__dlpack_device__() for f in fields] == [(2, 0), (2, 0)]
            capsules = [f.__dlpack__(stream=-1) for f in fields]  # DLPack producers
            x, y = dl_tensor(capsules[0]), dl_tensor(capsules[1])
            assert (x.device_type, x.device_id, x.ndim) == (2, 0, 2)  # kDLCUDA, cuda:0
            assert (x.shape[0], x.shape[1], x.code, x.bits) == (6, 3, 2, 32)  # float32
            assert (y.ndim, y.shape[0], y.code, y.bits) == (1, 6, 0, 64)  # int64
            FAKE.mpistage_fake_cuda_drain()  # the copies ran (the double's device = host)
            xs = np.ctypeslib.as_array((ctypes.c_float * 18).from_address(x.data)).reshape(6, 3)
            ys = np.ctypeslib.as_array((ctypes.c_int64 * 6).from_address(y.data))
            for slot in np.flatnonzero(valid):
                sid = index[slot]
                assert ys[slot] == sid
                assert np.array_equal(xs[slot], sid * 10 + np.arange(3, dtype=np.float32))
            ids.extend(index[valid].tolist())
            assert num_valid == int(valid.sum())
        with pytest.raises(StopIteration):  # the end, agreed: the epoch is over
            it._core.next()
        all_ids = gather_ids(ids)
        assert sorted(all_ids.tolist()) == list(range(103)), f"epoch {epoch}: not exactly once"
    loader.close()


def test_wide_unsigned_fields_cross_as_signed_and_a_consumed_capsule_is_not_freed_twice(
        workdir, torch_sees_a_gpu):
    path = os.path.join(workdir, "u16.h5")
    if COMM.rank == 0:
        import h5py
        with h5py.File(path, "w") as f:
            f["u"] = (np.arange(50) * 1000 % 65536).astype(np.uint16)
    COMM.Barrier()
    loader = mpistage.Loader(mpistage.open_source(path), batch_size=4, timeout=TIMEOUT,
                             device="cuda")
    it = loader.epoch(0)
    seen = 0
    for _ in range(it.steps):
        _, _, _, index, valid, fields, _, device = it._core.next()
        capsule = fields[0].__dlpack__()
        u = dl_tensor(capsule)
        # DLPack 0.6 as torch before 2.3 reads it: uint16 crosses as int16 (kDLInt 16), the
        # bytes unchanged (to_legacy_dtypes, as the libtorch path does)
        assert (u.device_type, u.code, u.bits, u.shape[0]) == (2, 0, 16, 4)
        FAKE.mpistage_fake_cuda_drain()
        got = np.ctypeslib.as_array((ctypes.c_uint16 * 4).from_address(u.data))
        assert np.array_equal(got[valid], (index[valid] * 1000 % 65536).astype(np.uint16))
        seen += int(valid.sum())
        # A consumer takes the tensor (renames the capsule) and calls its deleter itself: the
        # capsule, collected afterwards, must not call it again.
        managed = DLManagedTensor.from_address(
            ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor"))
        deleter = managed.deleter
        assert ctypes.pythonapi.PyCapsule_SetName(capsule, b"used_dltensor") == 0
        deleter(ctypes.addressof(managed))
        del fields, capsule
    with pytest.raises(StopIteration):
        it._core.next()
    assert COMM.allreduce(seen) == 48  # remainder "drop": 50 // (4 * W) * 4 * W at W <= 4
    loader.close()


def test_a_torch_without_cuda_stages_on_the_cpu_and_refuses_cuda(small_h5):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    source = mpistage.open_source(small_h5)
    loader = mpistage.Loader(source, batch_size=6, timeout=TIMEOUT)  # device "auto"
    assert loader.stats["device"] == "cpu"  # the double offers a device; torch cannot take it
    loader.close()
    with pytest.raises(mpistage.ConfigError, match="has no CUDA"):
        mpistage.Loader(source, batch_size=6, device="cuda", timeout=TIMEOUT)
    COMM.Barrier()


def test_numpy_tensors_stage_on_the_cpu_and_refuse_cuda(small_h5):
    source = mpistage.open_source(small_h5)
    loader = mpistage.Loader(source, batch_size=6, tensors="numpy", timeout=TIMEOUT)
    assert loader.stats["device"] == "cpu"  # "auto" would find the double's device
    batch = next(iter(loader.epoch(0)))
    assert isinstance(batch["x"], np.ndarray)
    loader.close()
    with pytest.raises(mpistage.ConfigError, match="tensors='numpy'"):
        mpistage.Loader(source, batch_size=6, tensors="numpy", device="cuda", timeout=TIMEOUT)
    COMM.Barrier()


FAKE.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.c_void_p]
FAKE.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
FAKE.cudaHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
FAKE.cudaFreeHost.argtypes = [ctypes.c_void_p]
_PINNED = []  # the read buffers of a test, freed by torch_on_a_stream


def _field_bytes(t):
    n = t.bits // 8 * t.lanes
    for d in range(t.ndim):
        n *= t.shape[d]
    return n


def _stream(nonblocking=True):
    handle = ctypes.c_void_p()
    # cudaStreamNonBlocking (1), as torch's streams: the legacy default stream does not
    # order it, so only the loader's events do.
    assert FAKE.cudaStreamCreateWithFlags(ctypes.byref(handle), 1 if nonblocking else 0) == 0
    return handle.value


def _read_on(stream, capsule, keep):
    """Queues a read of the field on `stream` (a device-to-host copy into a numpy buffer, as a
    kernel would read it): no host wait, no wait_stream."""
    t = dl_tensor(capsule)
    # Pinned, as a kernel's output would be device memory: a copy into pageable memory
    # returns only once it ran (as the runtime's), which would serialise the host with
    # `stream` and hide the bug.
    pinned = ctypes.c_void_p()
    assert FAKE.cudaHostAlloc(ctypes.byref(pinned), _field_bytes(t), 0) == 0
    _PINNED.append(pinned.value)
    buf = np.ctypeslib.as_array((ctypes.c_uint8 * _field_bytes(t)).from_address(pinned.value))
    assert FAKE.cudaMemcpyAsync(buf.ctypes.data, t.data, buf.size, 2, stream) == 0  # D2H
    keep.append(buf)
    return buf


def _check_reads(reads):
    wrong = 0
    for index, valid, xb, yb in reads:
        xs, ys = xb.view(np.float32).reshape(-1, 3), yb.view(np.int64)
        for slot in np.flatnonzero(valid):
            sid = index[slot]
            wrong += int(ys[slot] != sid or not np.array_equal(
                xs[slot], sid * 10 + np.arange(3, dtype=np.float32)))
    return wrong


def _slow(stream, scratch, n):
    """n device-to-device copies of 20 ms each on `stream`: a trainer's kernels still queued."""
    for _ in range(n):
        assert FAKE.cudaMemcpyAsync(scratch[1], scratch[0], 64, 3, stream) == 0  # D2D


@pytest.fixture
def torch_on_a_stream(monkeypatch):
    """torch (CPU-only in CI) told it has a GPU whose current stream is a fresh non-blocking
    stream of the double; torch.from_dlpack runs its real protocol code (it calls the field's
    __dlpack_device__ and __dlpack__(stream=current)) and returns the capsule it got, which a
    CPU-only torch could not import."""
    import torch
    import torch.utils.dlpack

    class Current:
        cuda_stream = _stream()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Current)
    monkeypatch.setattr(torch.utils.dlpack, "_from_dlpack", lambda capsule: capsule)
    FAKE.mpistage_fake_cuda_set_copy_delay_us(20000)
    yield Current
    FAKE.mpistage_fake_cuda_drain()
    FAKE.mpistage_fake_cuda_set_copy_delay_us(0)
    for p in _PINNED:
        FAKE.cudaFreeHost(p)
    del _PINNED[:]
    FAKE.cudaStreamDestroy(ctypes.c_void_p(Current.cuda_stream))


def _scratch():
    a, b = ctypes.c_void_p(), ctypes.c_void_p()
    assert FAKE.cudaMalloc(ctypes.byref(a), 64) == 0 and FAKE.cudaMalloc(ctypes.byref(b), 64) == 0
    return a.value, b.value


def test_batches_are_read_right_on_torchs_current_stream_without_wait_stream(
        small_h5, torch_on_a_stream):
    """Issue 39, bug 3: Python batches were ordered and fenced on the legacy default stream
    only. Each batch is read on torch's current stream (a non-blocking stream) behind 200 ms
    of queued work (the loader needs 80 ms per batch), and dropped at once: its device block
    must not be refilled before that read ran, and the read must see the batch's copy. Every
    value is checked at the end. With the bug: 24 of 52 samples per rank read wrong."""
    stream = torch_on_a_stream.cuda_stream
    scratch = _scratch()
    loader = mpistage.Loader(mpistage.open_source(small_h5), batch_size=6, sharding="global",
                             shuffle="global", remainder="mask", timeout=TIMEOUT,
                             device="cuda", prefetch=2)
    reads, keep, ids = [], [], []
    for batch in loader.epoch(0):
        _slow(stream, scratch, 10)
        xb = _read_on(stream, batch["x"], keep)
        yb = _read_on(stream, batch["y"], keep)
        reads.append((batch.index.numpy().copy(), batch.valid.numpy().copy(), xb, yb))
        ids.extend(batch.index[batch.valid].tolist())
        del batch  # dropped before the read ran: the block is fenced on `stream`
    FAKE.cudaStreamSynchronize(ctypes.c_void_p(stream))
    loader.close()
    assert sorted(gather_ids(ids).tolist()) == list(range(103))
    wrong = COMM.allgather(_check_reads(reads))
    assert wrong == [0] * COMM.size, f"samples read wrong on torch's stream, per rank: {wrong}"


def test_cuda_stream_argument_and_record_stream_order_other_streams(small_h5, torch_on_a_stream):
    """cuda_stream= (a CuPy-style object with ptr) orders batches on that stream instead of
    torch's; Batch.record_stream(s) makes a further stream safe to read on too."""
    mine, other = _stream(), _stream()
    scratch = _scratch()

    class CupyLike:
        ptr = mine

    loader = mpistage.Loader(mpistage.open_source(small_h5), batch_size=6, timeout=TIMEOUT,
                             device="cuda", prefetch=2, cuda_stream=CupyLike)
    reads, keep = [], []
    for step, batch in enumerate(loader.epoch(0)):
        on = mine if step % 2 == 0 else other
        if on == other:
            batch.record_stream(other)
        _slow(on, scratch, 10)
        xb = _read_on(on, batch["x"], keep)
        yb = _read_on(on, batch["y"], keep)
        reads.append((batch.index.numpy().copy(), batch.valid.numpy().copy(), xb, yb))
        del batch
    for s in (mine, other):
        FAKE.cudaStreamSynchronize(ctypes.c_void_p(s))
    loader.close()
    wrong = COMM.allgather(_check_reads(reads))
    assert wrong == [0] * COMM.size, f"samples read wrong, per rank: {wrong}"
    with pytest.raises(TypeError, match="cuda_stream="):
        mpistage.Loader(mpistage.open_source(small_h5), batch_size=6, device="cuda",
                        cuda_stream="0", timeout=TIMEOUT)
    with pytest.raises(mpistage.ConfigError, match="cuda_stream="):
        mpistage.Loader(mpistage.open_source(small_h5), batch_size=6, device="cpu",
                        cuda_stream=mine, timeout=TIMEOUT)
    for s in (mine, other):
        FAKE.cudaStreamDestroy(ctypes.c_void_p(s))
