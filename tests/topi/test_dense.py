"""dense and batch_matmul (x86 vector dot tiles, plain (B, K, N) form) against numpy."""

import numpy as np
import pytest

from kiln import te, topi
from kiln.topi import testing


@pytest.mark.parametrize("m,n,k,bias", [(1, 100, 64, True), (37, 29, 51, False), (8, 16, 5, True), (4, 33, 160, True)])
def test_dense_x86(runner, m, n, k, bias):
    A = te.placeholder((m, k), name="data")
    W = te.placeholder((n, k), name="weight")
    B = te.placeholder((n,), name="bias")
    out = topi.x86.dense(A, W, B if bias else None)
    a, w, b = runner.rand(m, k), runner.rand(n, k), runner.rand(n)
    args, inputs = ([A, W, B], [a, w, b]) if bias else ([A, W], [a, w])
    got = runner.run(topi.x86.schedule_dense, out, args, inputs)
    np.testing.assert_allclose(got, testing.dense_python(a, w, b if bias else None), rtol=1e-4, atol=1e-3)


def test_dense_fused_relu_with_config(runner):
    A = te.placeholder((9, 48), name="data")
    W = te.placeholder((20, 48), name="weight")
    out = topi.nn.relu(topi.x86.dense(A, W, cfg={"tile_m": 3, "tile_n": 5, "lanes": 8}))
    a, w = runner.rand(9, 48), runner.rand(20, 48)
    got = runner.run(topi.x86.schedule_dense, out, [A, W], [a, w])
    np.testing.assert_allclose(got, np.maximum(a @ w.T, 0), rtol=1e-4, atol=1e-3)


def test_dense_int8_to_int32(runner):
    A = te.placeholder((3, 40), name="data", dtype="int8")
    W = te.placeholder((17, 40), name="weight", dtype="int8")
    out = topi.x86.dense(A, W, out_dtype="int32")
    a, w = runner.rand(3, 40, dtype="int8"), runner.rand(17, 40, dtype="int8")
    got = runner.run(topi.x86.schedule_dense, out, [A, W], [a, w])
    np.testing.assert_array_equal(got, a.astype("int32") @ w.astype("int32").T)


def test_generic_dense_and_matmul(runner):
    A = te.placeholder((5, 7), name="a")
    W = te.placeholder((7, 3), name="b")
    out = topi.nn.matmul(A, W)
    a, w = runner.rand(5, 7), runner.rand(7, 3)
    np.testing.assert_allclose(runner.run(topi.generic.schedule_dense, out, [A, W], [a, w]), a @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ba,bb,m,n,k,tb", [(3, 3, 17, 23, 40, True), (2, 1, 9, 37, 21, False), (1, 4, 5, 6, 7, True)])
def test_batch_matmul_x86(runner, ba, bb, m, n, k, tb):
    X = te.placeholder((ba, m, k), name="x")
    Y = te.placeholder((bb, n, k) if tb else (bb, k, n), name="y")
    out = topi.x86.batch_matmul(X, Y, transpose_b=tb)
    x, y = runner.rand(ba, m, k), runner.rand(*[int(s.value) for s in Y.shape])
    got = runner.run(topi.x86.schedule_batch_matmul, out, [X, Y], [x, y])
    ref = testing.batch_matmul_python(np.broadcast_to(x, (max(ba, bb), m, k)), np.broadcast_to(y, (max(ba, bb),) + y.shape[1:]),
                                      transpose_b=tb)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


def test_dense_followed_by_reshape(runner):
    A = te.placeholder((4, 32), name="data")
    W = te.placeholder((12, 32), name="weight")
    out = topi.reshape(topi.x86.dense(A, W), (2, 24))
    a, w = runner.rand(4, 32), runner.rand(12, 32)
    got = runner.run(topi.x86.schedule_dense, out, [A, W], [a, w])
    np.testing.assert_allclose(got, (a @ w.T).reshape(2, 24), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n", [64, 50])
def test_dense_with_prepacked_weight(runner, n):
    import importlib

    x86_dense = importlib.import_module("kiln.topi.x86.dense")
    a, w, b = runner.rand(32, 40), runner.rand(n, 40), runner.rand(n)
    conf = x86_dense.config_for(32, n, 40)
    assert conf["kernel"] == "gemm"
    packed = x86_dense.prepack_weight(w, conf["tile_n"])
    A = te.placeholder(a.shape, name="data")
    W = te.placeholder(packed.shape, name="weight_packed")
    B = te.placeholder((n,), name="bias")
    out = topi.x86.dense(A, W, B, units=n)
    got = runner.run(topi.x86.schedule_dense, out, [A, W, B], [a, packed, b])
    np.testing.assert_allclose(got, testing.dense_python(a, w, b), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m,n,k,tile_k", [(50, 100, 96, 0), (50, 100, 96, 32), (64, 96, 80, 40), (23, 70, 50, 16)])
def test_dense_gemm_tiles_and_k_blocks(runner, m, n, k, tile_k):
    """The GEMM path's default tile (rows and columns padded where it does not divide M, N) and
    the K-blocked schedule (knob tile_k; 16 does not divide 50: a guarded last block), with bias
    and relu as the epilogue, against numpy."""
    A = te.placeholder((m, k), name="data")
    W = te.placeholder((n, k), name="weight")
    B = te.placeholder((n,), name="bias")
    out = topi.nn.relu(topi.x86.dense(A, W, B, cfg={"tile_k": tile_k}))
    a, w, b = runner.rand(m, k), runner.rand(n, k), runner.rand(n)
    got = runner.run(topi.x86.schedule_dense, out, [A, W, B], [a, w, b])
    np.testing.assert_allclose(got, np.maximum(testing.dense_python(a, w, b), 0), rtol=1e-4, atol=1e-3)


def test_batch_matmul_k_blocks(runner):
    X = te.placeholder((2, 30, 64), name="x")
    Y = te.placeholder((2, 64, 40), name="y")
    out = topi.x86.batch_matmul(X, Y, transpose_b=False, cfg={"tile_k": 16})
    x, y = runner.rand(2, 30, 64), runner.rand(2, 64, 40)
    got = runner.run(topi.x86.schedule_batch_matmul, out, [X, Y], [x, y])
    np.testing.assert_allclose(got, x @ y, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m,n,prefetch", [(37, 50, 1), (32, 64, 1), (32, 64, 0)])
def test_dense_prefetches_the_next_panel(runner, m, n, prefetch):
    """Pre-packed weights: the GEMM asks for the next column panel's lines ahead (knob prefetch,
    default on where two panels and the data fit the L2 budget); padded rows (37) and a last
    panel past N (50) included. The result does not change, the instructions do."""
    import importlib

    import kiln as tvm

    x86_dense = importlib.import_module("kiln.topi.x86.dense")
    matmul_nn = importlib.import_module("kiln.topi.x86.matmul_nn")
    k = 48
    conf = x86_dense.config_for(m, n, k)
    assert matmul_nn.prefetch_default(m, k, conf["tile_n"], tile_m=conf["tile_m"]) == 1
    a, w, b = runner.rand(m, k), runner.rand(n, k), runner.rand(n)
    packed = x86_dense.prepack_weight(w, x86_dense.config_for(m, n, k)["tile_n"])
    A, W, B = (te.placeholder(x.shape, name=nm) for x, nm in ((a, "data"), (packed, "weight_packed"), (b, "bias")))
    out = topi.x86.dense(A, W, B, units=n, cfg={"prefetch": prefetch})
    s = topi.x86.schedule_dense([out])
    f = tvm.build(s, [A, W, B, out], target="llvm")
    got = tvm.nd.empty((m, n), "float32")
    f(tvm.nd.array(a), tvm.nd.array(packed), tvm.nd.array(b), got)
    np.testing.assert_allclose(got.numpy(), testing.dense_python(a, w, b), rtol=1e-4, atol=1e-3)
    asm = f.get_source("asm")
    asked = any(op in asm for op in ("prefetch", "prfm"))  # x86, AArch64
    assert asked == bool(prefetch), "prefetch instructions present iff the knob is on"
