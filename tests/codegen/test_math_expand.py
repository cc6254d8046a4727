"""sigmoid / rsqrt / exp10 where the kernel language lacks them (kiln/tir/math_expand.py): the
C target writes all three with other libm calls, the GPU printers sigmoid; both against numpy."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir


def _build(target: str):
    n = 64
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.sigmoid(A[i]) + te.rsqrt(A[i] + 1.0) + tir.exp10(A[i] * 0.5), name="B")
    s = te.create_schedule(B.op)
    if target == "opencl":
        bx, tx = s[B].split(B.op.axis[0], factor=16)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return tvm.build(s, [A, B], target=target, name="k")


@pytest.mark.parametrize("target", ["c", "opencl"])
def test_expanded_math_matches_numpy(target):
    if target == "opencl":
        pytest.importorskip("pyopencl", reason="needs pyopencl (pip install -e '.[opencl]')")
        from kiln.runtime.devices.opencl import API
        if not API.exist(0):
            pytest.skip("needs an OpenCL device (apt-get install pocl-opencl-icd)")
    f = _build(target)
    src = f.get_source("c" if target == "c" else "cl")
    assert "sigmoid" not in src
    if target == "c":
        assert "rsqrt" not in src and "exp10" not in src and "powf(10.0f" in src
    dev = tvm.cpu() if target == "c" else tvm.cl(0)
    x = np.random.default_rng(0).uniform(-0.9, 2, 64).astype("float32")
    b = tvm.nd.empty((64,), "float32", dev)
    f(tvm.nd.array(x, dev), b)
    x64 = x.astype("float64")
    want = 1 / (1 + np.exp(-x64)) + 1 / np.sqrt(x64 + 1) + 10 ** (x64 * 0.5)
    # each term a few float32 roundings (libm within 4 ulp); the sum is below 12
    np.testing.assert_allclose(b.numpy(), want, rtol=0, atol=16 * 12 * np.finfo("float32").eps)
