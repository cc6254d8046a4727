import numpy as np
import pytest

import kiln as tvm

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]


def _sample(dtype, shape=(3, 5)):
    rng = np.random.default_rng(0)
    return (rng.standard_normal(shape) * 50).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_array_roundtrip(dtype):
    src = _sample(dtype)
    a = tvm.nd.array(src, tvm.cpu(0))
    assert a.shape == (3, 5) and a.dtype == dtype and a.device == tvm.cpu(0)
    out = a.numpy()
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, src)
    np.testing.assert_array_equal(a.asnumpy(), src)


def test_array_is_a_copy_and_aligned():
    src = np.arange(10, dtype="float32")
    a = tvm.nd.array(src)
    src[0] = 99
    assert a.numpy()[0] == 0
    assert a._tensor.data % 64 == 0
    assert a.handle.contents.ndim == 1 and a.handle.contents.shape[0] == 10


def test_array_from_noncontiguous_and_list():
    src = np.arange(12, dtype="int32").reshape(3, 4)[:, ::2]
    np.testing.assert_array_equal(tvm.nd.array(src).numpy(), src)
    assert tvm.nd.array([[1, 2], [3, 4]]).shape == (2, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_shape_dtype(dtype):
    a = tvm.nd.empty((2, 0, 3), dtype)
    assert a.shape == (2, 0, 3) and a.dtype == dtype and a.numpy().shape == (2, 0, 3)
    assert tvm.nd.empty(4).shape == (4,)


def test_zero_dim_array():
    a = tvm.nd.array(np.array(3.5, dtype="float64"))
    assert a.shape == () and a.numpy() == 3.5


def test_copyfrom_and_copyto():
    a = tvm.nd.empty((2, 3), "float32")
    src = _sample("float32", (2, 3))
    a.copyfrom(src)
    b = tvm.nd.empty((2, 3), "float32")
    a.copyto(b)
    np.testing.assert_array_equal(b.numpy(), src)
    c = a.copyto(tvm.cpu(0))
    np.testing.assert_array_equal(c.numpy(), src)
    b.copyfrom(tvm.nd.array(np.zeros((2, 3), "float32")))
    assert not b.numpy().any()
    b[:] = 7
    assert (b.numpy() == 7).all()


def test_copyfrom_errors():
    a = tvm.nd.empty((2, 3), "float32")
    with pytest.raises(ValueError, match=r"copyfrom: source has shape \(3, 2\), this array has shape \(2, 3\)"):
        a.copyfrom(np.zeros((3, 2), "float32"))
    with pytest.raises(ValueError, match=r"source has dtype float64, this array has dtype float32; "
                                         r"convert with source.astype\('float32'\)"):
        a.copyfrom(np.zeros((2, 3), "float64"))


def test_unsupported_dtype():
    with pytest.raises(ValueError, match="dtype 'complex64' is not supported"):
        tvm.nd.empty((2,), "complex64")
    with pytest.raises(ValueError, match="shape must be a tuple of non-negative ints"):
        tvm.nd.empty((2, -1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_dlpack_to_numpy_shares_memory(dtype):
    a = tvm.nd.array(_sample(dtype, (4,)))
    view = np.from_dlpack(a)
    assert view.dtype == np.dtype(dtype) and view.flags.writeable
    view[1] = view[0]
    np.testing.assert_array_equal(a.numpy(), view)
    del a  # the numpy view keeps the memory alive
    assert view[1] == view[0]


def test_dlpack_from_numpy_shares_memory():
    host = np.zeros((2, 3), dtype="float32")
    a = tvm.nd.from_dlpack(host)
    assert a.shape == (2, 3) and a.dtype == "float32"
    a.copyfrom(np.ones((2, 3), "float32"))
    assert (host == 1).all()
    host[0, 0] = 5
    assert a.numpy()[0, 0] == 5


def test_dlpack_from_numpy_view_with_offset():
    base = np.arange(12, dtype="int64").reshape(3, 4)
    a = tvm.nd.from_dlpack(base[1:])
    np.testing.assert_array_equal(a.numpy(), base[1:])
    a[:] = 0
    assert base[1:].sum() == 0 and base[0].sum() == 6


def test_dlpack_keeps_producer_alive():
    a = tvm.nd.from_dlpack(np.arange(1000, dtype="float64"))
    import gc
    gc.collect()
    np.testing.assert_array_equal(a.numpy(), np.arange(1000, dtype="float64"))


def test_dlpack_roundtrip_through_kiln():
    a = tvm.nd.array(np.arange(6, dtype="int16"))
    b = tvm.nd.from_dlpack(a)
    b[:] = np.full(6, 3, dtype="int16")
    assert (a.numpy() == 3).all()
    assert a.__dlpack_device__() == (1, 0)


def test_dlpack_rejects_strided_and_readonly():
    with pytest.raises(ValueError, match="strides .* kernels need compact row-major"):
        tvm.nd.from_dlpack(np.zeros((4, 4), "float32")[:, ::2])
    ro = np.zeros(4, "float32")
    ro.flags.writeable = False
    with pytest.raises((ValueError, BufferError), match="read-only"):
        tvm.nd.from_dlpack(ro)
    with pytest.raises(TypeError, match="list has no __dlpack__"):
        tvm.nd.from_dlpack([1, 2])


def test_unconsumed_capsule_is_released():
    from kiln.runtime import dlpack
    a = tvm.nd.array(np.zeros(3, "float32"))
    before = len(dlpack._exported)
    capsule = a.__dlpack__()
    assert len(dlpack._exported) == before + 1
    del capsule
    assert len(dlpack._exported) == before


class _FakeSession:
    def __init__(self):
        self.calls = []

    def nd_array(self, arr, dev):
        self.calls.append(("array", arr.shape, dev))
        return "remote-array"

    def nd_empty(self, shape, dtype, dev):
        self.calls.append(("empty", shape, dtype))
        return "remote-empty"


def test_remote_dispatch_hook():
    session = _FakeSession()
    dev = tvm.runtime.Device(1, 0, session=session)
    assert tvm.nd.array(np.zeros(3), dev) == "remote-array"
    assert tvm.nd.empty((2,), "int8", dev) == "remote-empty"
    assert session.calls == [("array", (3,), dev), ("empty", (2,), "int8")]
