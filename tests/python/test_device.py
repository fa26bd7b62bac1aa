"""Batches on a CUDA device reach Python as DLPack capsules over the staged device memory, on the
CUDA test double (tests/fake_cuda, preloaded: its "device memory" is host memory, so the bytes
can be read back here without a GPU). Before this, the extension built numpy arrays over the
host pointer of a CUDA batch, which is null (found reading the code for an H200 run). Known
answers: h5py's x = id * 10 + column."""
import ctypes

import numpy as np
import pytest
from conftest import COMM, TIMEOUT, gather_ids

import mpistage

FAKE = ctypes.CDLL(None)  # the preloaded double's control calls (fake_cuda.h)
if not hasattr(FAKE, "mpistage_fake_cuda_active") or FAKE.mpistage_fake_cuda_active() != 1:
    pytest.skip("the CUDA test double is not preloaded (LD_PRELOAD, tests/python/CMakeLists.txt)",
                allow_module_level=True)

ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]


class DLTensor(ctypes.Structure):  # DLPack's DLTensor, as include/mpistage/dlpack.hpp
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def dl_tensor(capsule):
    assert ctypes.pythonapi.PyCapsule_GetName(capsule) == b"dltensor"
    return DLTensor.from_address(ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor"))


def test_cuda_fields_are_dlpack_capsules_over_the_staged_bytes(small_h5):
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
            x, y = dl_tensor(fields[0]), dl_tensor(fields[1])
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
