"""The OpenCL device API, arrays on OpenCL devices and OpenCLModule, on PoCL (or any ICD).

Kernels here are written by hand, so these tests check the runtime alone; tests of
tvm.build(..., target="opencl") output live beside the loader tests (test_opencl_module.py).
"""

import numpy as np
import pytest

import kiln as tvm
from kiln.errors import KilnError
from kiln.runtime.devices.opencl import API, OpenCLModule

pytestmark = pytest.mark.opencl

SCALE_SOURCE = """
__kernel void scale_add(__global float* restrict out, __global const float* restrict a,
                        float alpha, int n) {
  int i = get_group_id(0) * get_local_size(0) + get_local_id(0);
  if (i < n) out[i] = a[i] * alpha + 1.0f;
}
__kernel void row_sum(__global float* restrict out, __global const float* restrict a, int cols) {
  int r = get_group_id(1);
  float acc = 0.0f;
  for (int c = 0; c < cols; ++c) acc += a[r * cols + c];
  out[r] = acc;
}
"""
SCALE_KERNELS = [
    {"name": "scale_add", "thread_tags": ["blockIdx.x", "threadIdx.x"],
     "params": [{"name": "out", "kind": "buffer", "dtype": "float32"},
                {"name": "a", "kind": "buffer", "dtype": "float32"},
                {"name": "alpha", "kind": "scalar", "dtype": "float32"},
                {"name": "n", "kind": "scalar", "dtype": "int32"}]},
    {"name": "row_sum", "thread_tags": ["blockIdx.y"],
     "params": [{"name": "out", "kind": "buffer", "dtype": "float32"},
                {"name": "a", "kind": "buffer", "dtype": "float32"},
                {"name": "cols", "kind": "scalar", "dtype": "int32"}]},
]


def test_device_names_and_attributes():
    for dev in (tvm.cl(0), tvm.opencl(0), tvm.device("opencl", 0), tvm.device("cl", 0)):
        assert dev.device_type == 4 and dev.device_id == 0 and str(dev) == "opencl(0)"
    dev = tvm.cl(0)
    assert dev.exist
    assert not tvm.cl(64).exist
    assert tvm.cl(64).max_threads_per_block is None  # absent devices have no attributes
    d = API.device(0)
    assert dev.max_threads_per_block == d.max_work_group_size >= 1
    assert dev.max_shared_memory_per_block == d.local_mem_size > 0
    assert dev.warp_size == 1
    assert dev.multi_processor_count == d.max_compute_units >= 1
    assert dev.device_name == d.name.strip()
    assert dev.compute_version == d.version.split()[1] and "." in dev.compute_version
    dims = dev.max_thread_dimensions
    assert len(dims) == 3 and all(x >= 1 for x in dims)
    assert API.attribute(0, "image_support") in (True, False)
    dev.sync()


def test_missing_device_message():
    with pytest.raises(KilnError, match=r"opencl\(64\) does not exist: this machine has \d+ OpenCL"):
        tvm.nd.empty((4,), "float32", tvm.cl(64))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64", "uint16", "bool"])
def test_array_round_trip(dtype):
    rng = np.random.default_rng(0)
    x = (rng.uniform(-100, 100, size=(3, 5, 7)) > 0 if dtype == "bool"
         else rng.uniform(0, 100, size=(3, 5, 7)).astype(dtype))
    a = tvm.nd.array(x, tvm.cl(0))
    assert a.device == tvm.cl(0) and a.shape == x.shape and a.dtype == dtype
    np.testing.assert_array_equal(a.numpy(), x)
    y = np.ascontiguousarray(x[::-1])
    a.copyfrom(y)
    np.testing.assert_array_equal(a.numpy(), y)


def test_empty_and_zero_sized():
    a = tvm.nd.empty((2, 3), "int32", tvm.cl(0))
    assert a.shape == (2, 3) and a.numpy().shape == (2, 3)
    z = tvm.nd.array(np.zeros((0, 4), "float32"), tvm.cl(0))
    assert z.numpy().shape == (0, 4)


def test_copies_between_devices():
    x = np.arange(24, dtype="float32").reshape(4, 6)
    on_cl = tvm.nd.array(x, tvm.cl(0))
    back = on_cl.copyto(tvm.cpu(0))
    assert back.device == tvm.cpu(0)
    np.testing.assert_array_equal(back.numpy(), x)
    other = on_cl.copyto(tvm.cl(0))  # device to device: a separate buffer
    assert other._tensor.data != on_cl._tensor.data
    on_cl.copyfrom(np.zeros_like(x))
    np.testing.assert_array_equal(other.numpy(), x)
    into = tvm.nd.empty((4, 6), "float32", tvm.cl(0))
    other.copyto(into)  # NDArray target on the same device stays on the device
    np.testing.assert_array_equal(into.numpy(), x)
    on_cl.copyfrom(tvm.nd.array(x * 2))  # from a CPU NDArray
    np.testing.assert_array_equal(on_cl.numpy(), x * 2)
    with pytest.raises(ValueError, match="must match"):
        into.copyfrom(tvm.nd.empty((6, 4), "float32", tvm.cl(0)))


def test_dlpack_export_of_device_array_is_refused_clearly():
    a = tvm.nd.array(np.ones(4, "float32"), tvm.cl(0))
    assert a.__dlpack_device__() == (4, 0)
    with pytest.raises(BufferError, match=r"lives on opencl\(0\).*use arr.numpy\(\)"):
        a.__dlpack__()
    with pytest.raises(BufferError, match=r"lives on opencl\(0\)"):
        np.from_dlpack(a)
    # A consumer that asks for a host copy gets one.
    capsule_owner = tvm.nd.from_dlpack(_HostCopy(a))
    np.testing.assert_array_equal(capsule_owner.numpy(), np.ones(4, "float32"))


class _HostCopy:
    """A producer wrapper that asks the array for a CPU export, as DLPack 1.0 consumers may."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, max_version=None, **_):
        return self.arr.__dlpack__(max_version=max_version, dl_device=(1, 0))


def test_module_launch_and_program_cache():
    mod = OpenCLModule(SCALE_SOURCE, SCALE_KERNELS)
    assert mod.type_key == "opencl" and mod.get_source() == SCALE_SOURCE
    n = 1000  # not a multiple of the block: the kernel's guard matters
    x = np.random.default_rng(1).uniform(size=n).astype("float32")
    a = tvm.nd.array(x, tvm.cl(0))
    out = tvm.nd.empty((n,), "float32", tvm.cl(0))
    block = 64
    mod.launch(0, [out._tensor.data, a._tensor.data, 2.5, n], ((n + block - 1) // block, 1, 1),
               (block, 1, 1))
    np.testing.assert_allclose(out.numpy(), x * 2.5 + 1, rtol=1e-6)
    built = mod.build(0)
    m = np.arange(12, dtype="float32").reshape(3, 4)
    rows = tvm.nd.empty((3,), "float32", tvm.cl(0))
    m_cl = tvm.nd.array(m, tvm.cl(0))
    mod.launch(1, [rows._tensor.data, m_cl._tensor.data, 4], (1, 3, 1), (1, 1, 1))
    np.testing.assert_allclose(rows.numpy(), m.sum(axis=1))
    assert mod.build(0) is built  # compiled once per context


def test_module_errors():
    bad = OpenCLModule("__kernel void k(__global float* a) { a[0] = undefined_name; }",
                       [{"name": "k", "params": [{"name": "a", "kind": "buffer", "dtype": "float32"}]}])
    a = tvm.nd.empty((1,), "float32", tvm.cl(0))
    with pytest.raises(KilnError, match=r"(?s)OpenCL program does not build.*undefined_name"):
        bad.launch(0, [a._tensor.data], (1, 1, 1), (1, 1, 1))
    mod = OpenCLModule(SCALE_SOURCE, SCALE_KERNELS)
    with pytest.raises(KilnError, match="kernel id 5 is out of range"):
        mod.launch(5, [], (1, 1, 1), (1, 1, 1))
    with pytest.raises(KilnError, match="scale_add takes 4 arguments, the host code passed 1"):
        mod.launch(0, [a._tensor.data], (1, 1, 1), (1, 1, 1))
    with pytest.raises(KilnError, match="dtype 'float8'"):
        OpenCLModule("", [{"name": "k", "params": [{"name": "x", "kind": "scalar", "dtype": "float8"}]}])


def test_launch_with_too_many_threads_per_block_says_so():
    mod = OpenCLModule(SCALE_SOURCE, SCALE_KERNELS)
    limit = tvm.cl(0).max_threads_per_block
    a = tvm.nd.empty((4,), "float32", tvm.cl(0))
    with pytest.raises(KilnError, match=rf"scale_add: launch of \(1, 1, 1\) blocks .* allows {limit} per block"):
        mod.launch(0, [a._tensor.data, a._tensor.data, 1.0, 4], (1, 1, 1), (limit * 2, 1, 1))
