"""Kernels written with te, built for the host and checked against numpy."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir

RNG = np.random.default_rng(0)


def build_run(s, args, inputs, out_shapes, out_dtypes, name="kernel"):
    f = tvm.build(s, args, target="llvm", name=name)
    dev = tvm.cpu(0)
    nd_in = [tvm.nd.array(x, dev) for x in inputs]
    nd_out = [tvm.nd.empty(shape, dtype, dev) for shape, dtype in zip(out_shapes, out_dtypes)]
    f(*nd_in, *nd_out)
    return [o.numpy() for o in nd_out]


def rand(*shape, dtype="float32"):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-100 if np.dtype(dtype).kind == "i" else 0, 100, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def test_add_one_matches_numpy():
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    a = rand(n)
    (b,) = build_run(s, [A, B], [a], [(n,)], ["float32"])
    np.testing.assert_array_equal(b, a + 1)


def test_broadcast_add():
    A = te.placeholder((4, 1, 5), name="A")
    B = te.placeholder((3, 1), name="B")
    C = te.compute((4, 3, 5), lambda i, j, k: A[i, 0, k] + B[j, 0], name="C")
    s = te.create_schedule(C.op)
    a, b = rand(4, 1, 5), rand(3, 1)
    (c,) = build_run(s, [A, B, C], [a, b], [(4, 3, 5)], ["float32"])
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


@pytest.mark.parametrize("reducer,ref", [(te.sum, np.sum), (te.max, np.max), (te.min, np.min)])
def test_reduce_over_two_axes_keepdims(reducer, ref):
    A = te.placeholder((6, 7, 8), name="A")
    j = te.reduce_axis((0, 7), name="j")
    k = te.reduce_axis((0, 8), name="k")
    B = te.compute((6, 1, 1), lambda i, _a, _b: reducer(A[i, j, k], axis=[j, k]), name="B")
    s = te.create_schedule(B.op)
    a = rand(6, 7, 8)
    (b,) = build_run(s, [A, B], [a], [(6, 1, 1)], ["float32"])
    np.testing.assert_allclose(b, ref(a, axis=(1, 2), keepdims=True), rtol=1e-5)


def matmul_compute(n, m, l, dtype="float32", acc="float32"):
    A = te.placeholder((n, l), name="A", dtype=dtype)
    B = te.placeholder((l, m), name="B", dtype=dtype)
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k].astype(acc) * B[k, j].astype(acc), axis=k), name="C")
    return A, B, C


def test_matmul_unscheduled():
    A, B, C = matmul_compute(33, 17, 20)
    s = te.create_schedule(C.op)
    a, b = rand(33, 20), rand(20, 17)
    (c,) = build_run(s, [A, B, C], [a, b], [(33, 17)], ["float32"])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_tiled_vectorized_parallel_with_tails():
    n, m, l = 70, 50, 37  # nothing divides the factors: split tails everywhere
    A, B, C = matmul_compute(n, m, l)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 16, 16)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    s[C].parallel(io)
    a, b = rand(n, l), rand(l, m)
    (c,) = build_run(s, [A, B, C], [a, b], [(n, m)], ["float32"])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_cache_write_compute_at():
    n = m = l = 64
    A, B, C = matmul_compute(n, m, l)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (k,) = s[CC].op.reduce_axis
    s[CC].reorder(k, ci, cj)
    s[CC].vectorize(cj)
    s[C].vectorize(ji)
    s[C].parallel(io)
    a, b = rand(n, l), rand(l, m)
    (c,) = build_run(s, [A, B, C], [a, b], [(n, m)], ["float32"])
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_int8_matmul_accumulates_in_int32():
    A, B, C = matmul_compute(16, 16, 64, dtype="int8", acc="int32")
    s = te.create_schedule(C.op)
    a = RNG.integers(-128, 128, size=(16, 64)).astype("int8")
    b = RNG.integers(-128, 128, size=(64, 16)).astype("int8")
    (c,) = build_run(s, [A, B, C], [a, b], [(16, 16)], ["int32"])
    np.testing.assert_array_equal(c, a.astype("int32") @ b.astype("int32"))


def test_float16_elementwise():
    A = te.placeholder((64,), name="A", dtype="float16")
    B = te.compute((64,), lambda i: A[i] * A[i] + tvm.tir.const(1, "float16"), name="B")
    s = te.create_schedule(B.op)
    a = rand(64, dtype="float16")
    (b,) = build_run(s, [A, B], [a], [(64,)], ["float16"])
    # a*a and +1 each round once in float16 (once in all where the CPU fuses them: AVX512-FP16's
    # vfmadd): within 2u(1+u) of the exact value, u = 2^-11, whichever the CPU does
    exact = a.astype("float64") ** 2 + 1
    np.testing.assert_allclose(b.astype("float64"), exact, rtol=2 * 2.0 ** -11 * (1 + 2.0 ** -11), atol=0)


def pad_nchw(data, pad):
    n, c, h, w = data.shape
    return te.compute(
        (n, c, h + 2 * pad, w + 2 * pad),
        lambda b, ch, y, x: te.if_then_else(
            te.all(y >= pad, y < h + pad, x >= pad, x < w + pad), data[b, ch, y - pad, x - pad], tvm.tir.const(0.0, data.dtype)
        ),
        name="pad",
    )


def conv2d_nchw(data, weight, pad, stride=1):
    n, c, h, w = data.shape
    oc, _, kh, kw = weight.shape
    padded = pad_nchw(data, pad)
    oh = (h.value + 2 * pad - kh.value) // stride + 1
    ow = (w.value + 2 * pad - kw.value) // stride + 1
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out = te.compute(
        (n, oc, oh, ow),
        lambda b, f, y, x: te.sum(padded[b, rc, y * stride + ry, x * stride + rx] * weight[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv",
    )
    return padded, out


def conv_ref(x, w, pad, stride=1):
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, oc, oh, ow), dtype=np.float64)
    for y in range(kh):
        for x_ in range(kw):
            patch = xp[:, :, y:y + stride * oh:stride, x_:x_ + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, y, x_])
    return out.astype(np.float32)


@pytest.mark.parametrize("scheduled", [False, True])
def test_conv2d_nchw(scheduled):
    data = te.placeholder((1, 8, 14, 14), name="data")
    weight = te.placeholder((16, 8, 3, 3), name="weight")
    padded, conv = conv2d_nchw(data, weight, pad=1)
    s = te.create_schedule(conv.op)
    if scheduled:
        b, f, y, x = s[conv].op.axis
        rc, ry, rx = s[conv].op.reduce_axis
        fo, fi = s[conv].split(f, factor=4)
        xo, xi = s[conv].split(x, factor=8)
        s[conv].reorder(b, fo, y, xo, rc, ry, rx, fi, xi)
        s[conv].vectorize(xi)
        s[conv].parallel(fo)
        s[padded].compute_inline()
    x, w = rand(1, 8, 14, 14), rand(16, 8, 3, 3)
    (out,) = build_run(s, [data, weight, conv], [x, w], [(1, 16, 14, 14)], ["float32"])
    np.testing.assert_allclose(out, conv_ref(x, w, 1), rtol=1e-4, atol=1e-4)


def test_conv2d_padding_computed_at_the_row():
    data = te.placeholder((1, 4, 10, 10), name="data")
    weight = te.placeholder((4, 4, 3, 3), name="weight")
    padded, conv = conv2d_nchw(data, weight, pad=1, stride=2)
    s = te.create_schedule(conv.op)
    b, f, y, x = s[conv].op.axis
    s[padded].compute_at(s[conv], y)
    xd, wd = rand(1, 4, 10, 10), rand(4, 4, 3, 3)
    (out,) = build_run(s, [data, weight, conv], [xd, wd], [(1, 4, 5, 5)], ["float32"])
    np.testing.assert_allclose(out, conv_ref(xd, wd, 1, 2), rtol=1e-4, atol=1e-4)


def test_depthwise_conv2d():
    data = te.placeholder((1, 6, 9, 9), name="data")
    weight = te.placeholder((6, 1, 3, 3), name="weight")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    out = te.compute((1, 6, 7, 7), lambda b, c, y, x: te.sum(data[b, c, y + ry, x + rx] * weight[c, 0, ry, rx], axis=[ry, rx]), name="dw")
    s = te.create_schedule(out.op)
    xd, wd = rand(1, 6, 9, 9), rand(6, 1, 3, 3)
    (o,) = build_run(s, [data, weight, out], [xd, wd], [(1, 6, 7, 7)], ["float32"])
    ref = np.zeros((1, 6, 7, 7), np.float32)
    for c in range(6):
        ref[0, c] = conv_ref(xd[:, c:c + 1], wd[c:c + 1], 0)[0, 0]
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-5)


def test_softmax():
    n, m = 8, 100
    A = te.placeholder((n, m), name="A")
    k1 = te.reduce_axis((0, m), name="k1")
    k2 = te.reduce_axis((0, m), name="k2")
    mx = te.compute((n,), lambda i: te.max(A[i, k1], axis=k1), name="mx")
    e = te.compute((n, m), lambda i, j: te.exp(A[i, j] - mx[i]), name="e")
    sm = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="sm")
    out = te.compute((n, m), lambda i, j: e[i, j] / sm[i], name="out")
    s = te.create_schedule(out.op)
    a = rand(n, m)
    (o,) = build_run(s, [A, out], [a], [(n, m)], ["float32"])
    ref = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(o, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_transpose():
    A = te.placeholder((5, 6, 7), name="A")
    B = te.compute((7, 5, 6), lambda i, j, k: A[j, k, i], name="B")
    s = te.create_schedule(B.op)
    a = rand(5, 6, 7)
    (b,) = build_run(s, [A, B], [a], [(7, 5, 6)], ["float32"])
    np.testing.assert_array_equal(b, a.transpose(2, 0, 1))


def test_pad():
    data = te.placeholder((1, 2, 5, 5), name="data")
    padded = pad_nchw(data, 2)
    s = te.create_schedule(padded.op)
    x = rand(1, 2, 5, 5)
    (o,) = build_run(s, [data, padded], [x], [(1, 2, 9, 9)], ["float32"])
    np.testing.assert_array_equal(o, np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2))))


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling(kind):
    data = te.placeholder((1, 3, 8, 8), name="data")
    ry = te.reduce_axis((0, 2), name="ry")
    rx = te.reduce_axis((0, 2), name="rx")
    if kind == "max":
        out = te.compute((1, 3, 4, 4), lambda b, c, y, x: te.max(data[b, c, y * 2 + ry, x * 2 + rx], axis=[ry, rx]), name="pool")
    else:
        summed = te.compute((1, 3, 4, 4), lambda b, c, y, x: te.sum(data[b, c, y * 2 + ry, x * 2 + rx], axis=[ry, rx]), name="sum")
        out = te.compute((1, 3, 4, 4), lambda b, c, y, x: summed[b, c, y, x] / 4.0, name="pool")
    s = te.create_schedule(out.op)
    x = rand(1, 3, 8, 8)
    (o,) = build_run(s, [data, out], [x], [(1, 3, 4, 4)], ["float32"])
    win = x.reshape(1, 3, 4, 2, 4, 2)
    ref = win.max(axis=(3, 5)) if kind == "max" else win.mean(axis=(3, 5))
    np.testing.assert_allclose(o, ref, rtol=1e-6)


def test_symbolic_shape_runs_at_three_sizes():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)
    f = tvm.build(s, [A, B], "llvm", name="affine")
    for size in (1, 17, 1000):
        a = tvm.nd.array(rand(size))
        b = tvm.nd.empty((size,), "float32")
        f(a, b)
        np.testing.assert_allclose(b.numpy(), a.numpy() * 2 + 1, rtol=1e-6)


def test_fuse_and_split_nparts_with_tail():
    A = te.placeholder((13, 11), name="A")
    B = te.compute((13, 11), lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    fused = s[B].fuse(*B.op.axis)
    o, i = s[B].split(fused, nparts=5)
    s[B].parallel(o)
    a = rand(13, 11)
    (b,) = build_run(s, [A, B], [a], [(13, 11)], ["float32"])
    np.testing.assert_allclose(b, a * 3, rtol=1e-6)


def test_cache_read_and_intrinsics():
    A = te.placeholder((32,), name="A")
    B = te.compute((32,), lambda i: te.sqrt(te.exp(A[i]) + tir.abs(A[i])) + te.tanh(A[i]) + te.sigmoid(A[i]), name="B")
    s = te.create_schedule(B.op)
    AA = s.cache_read(A, "local", [B])
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[AA].compute_at(s[B], xo)
    a = rand(32)
    (b,) = build_run(s, [A, B], [a], [(32,)], ["float32"])
    ref = np.sqrt(np.exp(a) + np.abs(a)) + np.tanh(a) + 1 / (1 + np.exp(-a))
    np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-6)


def test_floordiv_floormod_and_select_on_negative_ints():
    A = te.placeholder((40,), name="A", dtype="int32")
    B = te.compute((40,), lambda i: tir.floordiv(A[i], 7) * 100 + tir.floormod(A[i], 7) + tir.truncdiv(A[i], 3), name="B")
    s = te.create_schedule(B.op)
    a = np.arange(-20, 20, dtype="int32")
    (b,) = build_run(s, [A, B], [a], [(40,)], ["int32"])
    np.testing.assert_array_equal(b, (a // 7) * 100 + (a % 7) + np.trunc(a / 3).astype("int32"))


def test_create_prim_func_builds():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] * A[i], name="B")
    func = te.create_prim_func([A, B])
    f = tvm.build(func, target="llvm", name="square")
    a = tvm.nd.array(rand(16))
    b = tvm.nd.empty((16,), "float32")
    f(a, b)
    np.testing.assert_allclose(b.numpy(), a.numpy() ** 2, rtol=1e-6)


def test_cache_read_leaves_the_users_ops_untouched():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    s1 = te.create_schedule(B.op)
    s1.cache_read(A, "local", [B])
    # A second schedule of the same ops still reads A directly and builds.
    s2 = te.create_schedule(B.op)
    a = rand(16)
    for s in (s1, s2):
        (b,) = build_run(s, [A, B], [a], [(16,)], ["float32"])
        np.testing.assert_array_equal(b, a + 1)


def test_argmax_two_output_reduction_with_one_output_as_argument():
    A = te.placeholder((4, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    argmax = te.comm_reducer(
        lambda i0, v0, i1, v1: (tir.Select(v1 > v0, i1, i0, "int32"), tir.max(v0, v1)),
        lambda ti, tv: (tir.const(-1, ti), tir.min_value(tv)),
        name="argmax",
    )
    idx, val = te.compute((4,), lambda i: argmax((k.var.astype("int32"), A[i, k]), axis=k), name="pair")
    s = te.create_schedule(idx.op)
    a = rand(4, 9)
    (got,) = build_run(s, [A, idx], [a], [(4,)], ["int32"])
    np.testing.assert_array_equal(got, a.argmax(axis=1))
