"""te.decl_tensor_intrin + s[C].tensorize on the CPU: intrinsics written as plain TIR, checked against numpy."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir
from kiln.errors import ScheduleError


def _loop(v, n, body):
    return tir.For(v, tir.const(0), tir.const(n), tir.ForKind.SERIAL, body)


def intrin_gemm(n, dtype="float32", strided=True):
    """c[i, j] = sum_k a[i, k] * b[k, j] on an n x n tile, as TIR loops over strided buffers."""
    a = te.placeholder((n, n), dtype, name="a")
    b = te.placeholder((n, n), dtype, name="b")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    strides = (lambda t: [te.var(t.name + "_s"), 1]) if strided else (lambda t: None)
    binds = {t: tir.decl_buffer(t.shape, t.dtype, name=t.name.upper(), offset_factor=1, strides=strides(t))
             for t in (a, b, c)}

    def fintrin(ins, outs):
        A, B = ins
        (C,) = outs
        i, j, kk = te.var("i"), te.var("j"), te.var("k")
        reset = _loop(i, n, _loop(j, n, C.vstore((i, j), tir.const(0.0, dtype))))
        update = _loop(i, n, _loop(j, n, _loop(kk, n, C.vstore(
            (i, j), C.vload((i, j)) + A.vload((i, kk)) * B.vload((kk, j))))))
        return tir.SeqStmt((reset, update)), reset, update

    return te.decl_tensor_intrin(c.op, fintrin, name=f"gemm{n}", binds=binds)


def matmul(M, N, K, dtype="float32"):
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def run(s, A, B, C, M, N, K):
    f = tvm.build(s, [A, B, C], target="llvm")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    c = tvm.nd.empty((M, N))
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
    return f


def _schedule_4x4(C, i_factor=4, split_k=True):
    """C's i split by i_factor and j by 4, the tiles innermost; k split by 4 too (outside the
    tiles) unless not split_k. Returns the schedule and the inner i axis (where to tensorize)."""
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, i_factor)
    jo, ji = s[C].split(j, 4)
    k = C.op.reduce_axis[0]
    if split_k:
        ko, ki = s[C].split(k, 4)
        s[C].reorder(io, jo, ko, ii, ji, ki)
    else:
        s[C].reorder(io, jo, ii, ji, k)
    return s, ii


def test_tensorize_with_outer_reduction_uses_init_and_update():
    M, N, K = 16, 12, 20
    A, B, C = matmul(M, N, K)
    s, ii = _schedule_4x4(C)
    s[C].tensorize(ii, intrin_gemm(4))
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "k_outer" in text and "i_inner" not in text  # the tile loops are the intrinsic's own
    run(s, A, B, C, M, N, K)


def test_tensorize_whole_reduction_uses_body():
    M, N, K = 8, 8, 4
    A, B, C = matmul(M, N, K)
    s, ii = _schedule_4x4(C, split_k=False)
    s[C].tensorize(ii, intrin_gemm(4))
    run(s, A, B, C, M, N, K)


def test_tensorize_gemv_body_only():
    """y[i] = sum_k w[i, k] x[k]; fintrin returns one statement (buffers in op.input_tensors order)."""
    n = 8
    x = te.placeholder((n,), name="x")
    w = te.placeholder((n, n), name="w")
    k = te.reduce_axis((0, n), name="k")
    y = te.compute((n,), lambda i: te.sum(w[i, k] * x[k], axis=k), name="y")
    wb = tir.decl_buffer(w.shape, w.dtype, name="W", offset_factor=1, strides=[te.var("ws"), 1])

    def fintrin(ins, outs):
        wbuf, xb = ins
        (yb,) = outs
        i, kk = te.var("i"), te.var("k")
        # Plain TIR, the body only: the whole reduction sits under the tensorize axis.
        return tir.SeqStmt((_loop(i, n, yb.vstore((i,), tir.const(0.0))),
                            _loop(i, n, _loop(kk, n, yb.vstore((i,), yb.vload((i,)) + wbuf.vload((i, kk)) * xb.vload((kk,)))))))

    intrin = te.decl_tensor_intrin(y.op, fintrin, name="gemv", binds={w: wb})
    X = te.placeholder((n,), name="X")
    W = te.placeholder((32, n), name="W")
    r = te.reduce_axis((0, n), name="r")
    Y = te.compute((32,), lambda i: te.sum(W[i, r] * X[r], axis=r), name="Y")
    s = te.create_schedule(Y.op)
    yo, yi = s[Y].split(Y.op.axis[0], n)
    s[Y].tensorize(yi, intrin)
    f = tvm.build(s, [X, W, Y], target="llvm")
    xv = np.random.rand(n).astype("float32")
    wv = np.random.rand(32, n).astype("float32")
    yv = tvm.nd.empty((32,))
    f(tvm.nd.array(xv), tvm.nd.array(wv), yv)
    np.testing.assert_allclose(yv.numpy(), wv @ xv, rtol=1e-5)


def test_tensorize_batched_stage_with_2d_intrinsic():
    Bn, M, N, K = 2, 8, 8, 8
    A = te.placeholder((Bn, M, K), name="A")
    B = te.placeholder((Bn, K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((Bn, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    b, i, j = C.op.axis
    io, ii = s[C].split(i, 4)
    jo, ji = s[C].split(j, 4)
    ko, ki = s[C].split(k, 4)
    s[C].reorder(b, io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, intrin_gemm(4))
    f = tvm.build(s, [A, B, C], target="llvm")
    a = np.random.rand(Bn, M, K).astype("float32")
    bb = np.random.rand(Bn, K, N).astype("float32")
    c = tvm.nd.empty((Bn, M, N))
    f(tvm.nd.array(a), tvm.nd.array(bb), c)
    np.testing.assert_allclose(c.numpy(), a @ bb, rtol=1e-5)


def test_tensorize_rejects_wrong_tile_shape():
    A, B, C = matmul(16, 16, 16)
    s, ii = _schedule_4x4(C, i_factor=8)
    s[C].tensorize(ii, intrin_gemm(4))
    with pytest.raises(ScheduleError, match=r"axis i covers 8 iterations .* expects 4; split it by 4"):
        tvm.lower(s, [A, B, C])


def test_tensorize_rejects_other_computation_and_dtype():
    M = 16
    A = te.placeholder((M, M), name="A")
    B = te.placeholder((M, M), name="B")
    k = te.reduce_axis((0, M), name="k")
    C = te.compute((M, M), lambda i, j: te.sum(A[i, k] + B[k, j], axis=k), name="C")
    s, ii = _schedule_4x4(C)
    s[C].tensorize(ii, intrin_gemm(4))
    with pytest.raises(ScheduleError, match="does not match the intrinsic's"):
        tvm.lower(s, [A, B, C])
    A2, B2, C2 = matmul(M, M, M, dtype="float64")
    s, ii = _schedule_4x4(C2)
    s[C2].tensorize(ii, intrin_gemm(4))
    with pytest.raises(ScheduleError, match="float64 where the intrinsic's .* float32"):
        tvm.lower(s, [A2, B2, C2])


def test_tensorize_rejects_compact_buffer_on_strided_region():
    A, B, C = matmul(16, 16, 16)
    s, ii = _schedule_4x4(C)
    s[C].tensorize(ii, intrin_gemm(4, strided=False))
    with pytest.raises(ScheduleError, match="is compact but its region of A is not"):
        tvm.lower(s, [A, B, C])


def test_tensorize_bad_arguments():
    A, B, C = matmul(16, 16, 16)
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match="needs a te.decl_tensor_intrin"):
        s[C].tensorize(C.op.axis[0], "gemm")
    with pytest.raises(ScheduleError, match="must be the operation of a te.compute"):
        te.decl_tensor_intrin(A.op, lambda ins, outs: None)


def test_tensorize_rejects_transposed_operand():
    M = 16
    A = te.placeholder((M, M), name="A")
    B = te.placeholder((M, M), name="B")
    k = te.reduce_axis((0, M), name="k")
    C = te.compute((M, M), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")  # B transposed
    s, ii = _schedule_4x4(C)
    s[C].tensorize(ii, intrin_gemm(4))
    with pytest.raises(ScheduleError, match=r"B is read at index j \(dim 0\), which in the tile is j; "
                                            r"the intrinsic reads b at k"):
        tvm.lower(s, [A, B, C])


def test_tile_based_at_a_table_entry():
    """A tile read at an offset loaded from a table (a gather of 4-row blocks: rows t[j], ...,
    t[j] + 3 of A) tensorizes: the load in the index is part of the tile's base."""
    M, N, K, nblk = 8, 4, 16, 3
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((nblk * 4, N), "float32", name="B")
    T = te.placeholder((nblk,), "int32", name="T")
    j = te.reduce_axis((0, nblk), name="j")
    kk = te.reduce_axis((0, 4), name="kk")
    C = te.compute((M, N), lambda i, n: te.sum(A[i, T[j] + kk] * B[j * 4 + kk, n], axis=[j, kk]), name="C")
    s = te.create_schedule(C.op)
    i, n = C.op.axis
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(io, j, ii, n, kk)
    s[C].tensorize(ii, intrin_gemm(4))
    f = tvm.build(s, [A, B, T, C], target="llvm")
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((nblk * 4, N)).astype("float32")
    t = np.array([12, 0, 5], "int32")
    c = tvm.nd.empty((M, N))
    f(tvm.nd.array(a), tvm.nd.array(b), tvm.nd.array(t), c)
    want = sum(a[:, t[q]:t[q] + 4] @ b[4 * q:4 * q + 4] for q in range(nblk))
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-4, atol=1e-4)
