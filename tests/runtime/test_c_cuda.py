"""The C runtime on an NVIDIA GPU (src/runtime/cuda.c, libcuda.so.1 through dlopen): a tvmc
package built for 'cuda' run by kiln_run --device cuda against the Python CPU executor, and the
C kiln_rpc server's remote.cuda() running a CUDA module. Skips without a GPU."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import rpc, te
from kiln.driver.tvmc.compiler import export_package

from test_c_graph import kiln_run, make_runtime, python_outputs, two_output_model  # noqa: E402

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "crossdev"))
import boards  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return make_runtime(str(tmp_path_factory.mktemp("c-cuda")))


def test_cuda_package_with_kiln_run(build, tmp_path):
    lib, inputs = two_output_model(target="cuda", target_host="llvm", argmax=False)
    export_package(lib, str(tmp_path / "cuda.tar"))
    cpu_lib, _ = two_output_model(argmax=False)
    export_package(cpu_lib, str(tmp_path / "cpu.tar"))
    np.savez(tmp_path / "in.npz", **inputs)
    kiln_run(build, "--package", tmp_path / "cuda.tar", "--device", "cuda", "--input", tmp_path / "in.npz",
             "--output", tmp_path / "out.npz", "--dump-time", "--repeat", "2")
    got = np.load(tmp_path / "out.npz")
    want = python_outputs(str(tmp_path / "cpu.tar"), inputs, tmp_path)
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[f"output_{i}"], w, rtol=1e-5, atol=1e-5)


def test_kiln_rpc_remote_cuda(build, tmp_path):
    n = te.var("n")
    alpha = te.var("alpha", dtype="float32")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * alpha, name="B")
    C = te.compute((n,), lambda i: B[n - 1 - i] + 1.0, name="C")  # two kernels, a device workspace
    s = te.create_schedule(C.op)
    for X in (B, C):
        xo, xi = s[X].split(X.op.axis[0], factor=64)
        s[X].bind(xo, te.thread_axis("blockIdx.x"))
        s[X].bind(xi, te.thread_axis("threadIdx.x"))
    path = str(tmp_path / "two.so")
    tvm.build(s, [A, C, alpha], target=tvm.target.Target("cuda", host="llvm"), name="two").export_library(path)
    board = boards.start_board(os.path.join(build, "kiln_rpc"), None)
    try:
        remote = rpc.connect("127.0.0.1", board.port)
        dev = remote.cuda()
        assert dev.exist and dev.warp_size == 32 and dev.device_name == tvm.cuda(0).device_name
        remote.upload(path)
        func = remote.load_module("two.so")
        x = np.random.rand(1000).astype("float32")
        c = tvm.nd.empty((1000,), "float32", dev)
        func(tvm.nd.array(x, dev), c, 1.5)
        np.testing.assert_allclose(c.numpy(), (x * np.float32(1.5))[::-1] + 1, rtol=1e-6)
        res = func.time_evaluator("two", dev, number=3, repeat=2)(tvm.nd.array(x, dev), c, 2.0)
        assert len(res.results) == 2 and all(0 < r < 1 for r in res.results)
        remote.close()
    finally:
        board.stop()
