"""remote.cuda() on the Python RPC server: arrays on the server's GPU, a CUDA module uploaded as
.so and .tar (kernels, device workspace, a float scalar), time_evaluator on the device."""

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc, te
from kiln.errors import RPCError

sys.path.insert(0, os.path.dirname(__file__))
import rpc_services as svc  # noqa: E402

pytestmark = pytest.mark.gpu


def _connect(port):
    def attempt():
        try:
            return rpc.connect("127.0.0.1", port)
        except RPCError as e:
            if "busy" not in str(e):
                raise
            return None
    return svc.wait_until(attempt, what="server free")


def _two_kernels():
    n = te.var("n")
    alpha = te.var("alpha", dtype="float32")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * alpha, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for X in (B, C):
        xo, xi = s[X].split(X.op.axis[0], factor=64)
        s[X].bind(xo, te.thread_axis("blockIdx.x"))
        s[X].bind(xi, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, C, alpha], target=tvm.target.Target("cuda", host="llvm"), name="two")


def test_remote_cuda_arrays_and_attributes(rpc_server):
    remote = _connect(rpc_server.port)
    dev = remote.cuda()
    assert dev.exist and not remote.cuda(64).exist
    assert dev.max_threads_per_block == tvm.cuda(0).max_threads_per_block
    assert dev.device_name == tvm.cuda(0).device_name
    x = np.random.default_rng(0).uniform(size=(5 << 20,)).astype("float32")  # > one 16 MiB chunk
    a = tvm.nd.array(x, dev)
    assert a.device.device_type == 2
    np.testing.assert_array_equal(a.numpy(), x)
    b = tvm.nd.empty(x.shape, "float32", dev)
    b.copyfrom(a)
    np.testing.assert_array_equal(b.numpy(), x)
    dev.sync()
    remote.close()


@pytest.mark.parametrize("ext", ["so", "tar"])
def test_remote_cuda_module(rpc_server, tmp_path, ext):
    path = str(tmp_path / f"two.{ext}")
    _two_kernels().export_library(path)
    remote = _connect(rpc_server.port)
    remote.upload(path)
    func = remote.load_module(f"two.{ext}")
    dev = remote.cuda()
    for n in (1000, 65):
        x = np.random.uniform(size=n).astype("float32")
        c = tvm.nd.empty((n,), "float32", dev)
        func(tvm.nd.array(x, dev), c, 1.5)
        np.testing.assert_allclose(c.numpy(), (x * np.float32(1.5))[::-1] + 1, rtol=1e-6)
    a = tvm.nd.array(np.ones(4096, "float32"), dev)
    c = tvm.nd.empty((4096,), "float32", dev)
    res = func.time_evaluator("two", dev, number=3, repeat=2)(a, c, 2.0)
    assert len(res.results) == 2 and all(0 < r < 1 for r in res.results)
    remote.close()
