"""The three kernels the boards run: add_one, a tiled/vectorized matmul and a conv2d.

Each entry builds (schedule, tensors), random inputs and the numpy answer. Sizes are small:
under qemu-user every instruction is emulated.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from kiln import te

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
from matmul_schedule import matmul_schedule  # noqa: E402  (the hand-tuned schedule of the examples)


def add_one(n=1024):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)

    def inputs(rng):
        return [rng.random(n, dtype=np.float32), np.zeros(n, np.float32)]

    return s, [A, B], inputs, lambda a, _: a + 1


def matmul(M=32, N=64, K=32):
    s, tensors = matmul_schedule(M, N, K, mr=4, nr=16, kunroll=4)

    def inputs(rng):
        return [rng.random((M, K), dtype=np.float32), rng.random((K, N), dtype=np.float32),
                np.zeros((M, N), np.float32)]

    return s, tensors, inputs, lambda a, b, _: a @ b


def conv2d(N=1, C=4, H=12, W=12, K=8, R=3):
    """NCHW, stride 1, no padding; output rows vectorized, output channels parallel."""
    data = te.placeholder((N, C, H, W), name="data")
    weight = te.placeholder((K, C, R, R), name="weight")
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, R), name="ry")
    rx = te.reduce_axis((0, R), name="rx")
    OH, OW = H - R + 1, W - R + 1
    out = te.compute((N, K, OH, OW), lambda n, k, y, x: te.sum(
        data[n, rc, y + ry, x + rx] * weight[k, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    s = te.create_schedule(out.op)
    n, k, y, x = s[out].op.axis
    s[out].parallel(k)
    xo, xi = s[out].split(x, factor=OW // 2)
    s[out].vectorize(xi)

    def inputs(rng):
        return [rng.random((N, C, H, W), dtype=np.float32), rng.random((K, C, R, R), dtype=np.float32),
                np.zeros((N, K, OH, OW), np.float32)]

    def reference(d, w, _):
        ref = np.zeros((N, K, OH, OW), np.float32)
        for i in range(R):
            for j in range(R):
                ref += np.einsum("nchw,kc->nkhw", d[:, :, i:i + OH, j:j + OW], w[:, :, i, j])
        return ref

    return s, [data, weight, out], inputs, reference


def libm_calls(n=64):
    """floor and exp through libm: the board must resolve them though ld.lld linked no libm."""
    from kiln import tir

    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.floor(A[i] * 3.0) + tir.call_extern("float32", "expf", A[i]), name="B")
    s = te.create_schedule(B.op)

    def inputs(rng):
        return [rng.random(n, dtype=np.float32), np.zeros(n, np.float32)]

    return s, [A, B], inputs, lambda a, _: np.floor(a * 3) + np.exp(a)


KERNELS = {"add_one": add_one, "matmul": matmul, "conv2d": conv2d, "libm_calls": libm_calls}
