"""remote.cl() on the Python RPC server: arrays on the server's OpenCL device, GPU modules
uploaded as .so and .tar, time_evaluator on the device, device attributes."""

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runtime"))
import opencl_fixture  # noqa: E402
import rpc_services as svc  # noqa: E402
from kiln.errors import RPCError  # noqa: E402

pytestmark = pytest.mark.opencl


def _connect(port):
    """A session, once the server has finished the previous test's."""
    def attempt():
        try:
            return rpc.connect("127.0.0.1", port)
        except RPCError as e:
            if "busy" not in str(e):
                raise
            return None
    return svc.wait_until(attempt, what="server free")


@pytest.fixture(scope="module")
def gpu_module_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rpc-opencl")
    mod = opencl_fixture.module()
    for ext in ("so", "tar"):
        mod.export_library(str(d / f"lib_cl.{ext}"))
    return d


def test_remote_cl_arrays_and_attributes(rpc_server):
    remote = _connect(rpc_server.port)
    dev = remote.cl()
    assert dev.exist and not remote.cl(64).exist
    local = tvm.cl(0)  # the server runs on this machine: same device, same answers
    assert dev.max_threads_per_block == local.max_threads_per_block
    assert dev.max_thread_dimensions == local.max_thread_dimensions
    assert dev.device_name == local.device_name
    x = np.random.default_rng(0).uniform(size=(5, 7)).astype("float32")
    a = tvm.nd.array(x, dev)
    assert a.device.device_type == 4
    np.testing.assert_array_equal(a.numpy(), x)
    b = tvm.nd.empty((5, 7), "float32", dev)
    b.copyfrom(a)
    np.testing.assert_array_equal(b.numpy(), x)
    big = np.random.default_rng(1).uniform(size=(5 << 20,)).astype("float32")  # > one 16 MiB chunk
    c = tvm.nd.array(big, dev)
    np.testing.assert_array_equal(c.numpy(), big)
    dev.sync()
    remote.close()


@pytest.mark.parametrize("ext", ["so", "tar"])
def test_remote_gpu_module(rpc_server, gpu_module_files, ext):
    remote = _connect(rpc_server.port)
    remote.upload(str(gpu_module_files / f"lib_cl.{ext}"))
    func = remote.load_module(f"lib_cl.{ext}")
    dev = remote.cl()
    n = 1000
    a = tvm.nd.array(np.random.uniform(size=n).astype("float32"), dev)
    b = tvm.nd.array(np.zeros(n, dtype="float32"), dev)
    func(a, b)
    np.testing.assert_allclose(b.numpy(), a.numpy() + 1, rtol=1e-6)
    res = func.time_evaluator(func.entry_name, dev, number=4, repeat=2)(a, b)
    assert len(res.results) == 2 and all(0 < r < 1 for r in res.results)
    with pytest.raises(Exception, match=r"argument 'A' is on cpu\(0\)"):
        func(tvm.nd.array(np.ones(n, "float32"), remote.cpu()), b)
    remote.close()


@pytest.mark.parametrize("ext", ["so", "tar"])
def test_remote_built_module(rpc_server, tmp_path, ext):
    """tvm.build output (two kernels, workspace, symbolic size, float scalar) on the server."""
    path = str(tmp_path / f"two.{ext}")
    opencl_fixture.built_two_kernels().export_library(path)
    remote = _connect(rpc_server.port)
    remote.upload(path)
    func = remote.load_module(f"two.{ext}")
    dev = remote.cl()
    for n in (1000, 65):
        x = np.random.uniform(size=n).astype("float32")
        c = tvm.nd.empty((n,), "float32", dev)
        func(tvm.nd.array(x, dev), c, 1.5)
        np.testing.assert_allclose(c.numpy(), opencl_fixture.two_kernels_reference(x, 1.5), rtol=1e-6)
    a = tvm.nd.array(np.ones(4096, "float32"), dev)
    c = tvm.nd.empty((4096,), "float32", dev)
    res = func.time_evaluator("two", dev, number=3, repeat=2)(a, c, 2.0)
    assert len(res.results) == 2 and all(0 < r < 1 for r in res.results)
    remote.close()
