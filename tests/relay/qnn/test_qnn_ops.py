"""Each qnn op against an independent numpy reference: built with relay.build (qnn.Legalize +
qnn.CanonicalizeOps lower it to integer relay ops) and run by the graph executor, and run by
the numpy reference executor (the ops' own references). Integer results must be exact."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from qnn_run import module, reference, run

from kiln import relay
from kiln.errors import ShapeError
from kiln.relay import qnn
from kiln.relay.qnn.fixed_point import quantize_multiplier

RNG = np.random.default_rng(7)


def ints(shape, dtype="int8"):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, int(info.max) + 1, size=shape).astype(dtype)


def var(name, arr):
    return relay.var(name, shape=arr.shape, dtype=str(arr.dtype))


def both(body, inputs, target="llvm"):
    """(compiled, reference executor) outputs of ``body``."""
    mod = module(body)
    return run(mod, inputs, target)[0], reference(mod, inputs)[0]


def np_conv_int(x, w, zx, zw, strides=(1, 1), pad=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """Direct loops over the output (int64), padding with the data's zero point."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = pad
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=int(zx))
    oh = (h + pt + pb - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (wd + pl + pr - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    wc = w.astype(np.int64) - np.asarray(zw, np.int64).reshape(-1, 1, 1, 1)
    out = np.zeros((n, o, oh, ow), np.int64)
    for oc in range(o):
        g = oc // (o // groups)
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dilation[0]:i * dilation[0] + (oh - 1) * strides[0] + 1:strides[0],
                           j * dilation[1]:j * dilation[1] + (ow - 1) * strides[1] + 1:strides[1]]
                out[:, oc] += np.einsum("nchw,c->nhw", patch - int(zx), wc[oc, :, i, j])
    return out


# -- requantize: each rounding mode bit-exact against a separate implementation ----------------------

def _multiplier(real):
    """(q, shift) from math.frexp, written apart from kiln's."""
    m, e = math.frexp(real)
    q = int(Fraction(m) * 2 ** 31 + Fraction(1, 2)) if m > 0 else 0
    if q == 2 ** 31:
        q, e = q // 2, e + 1
    return q, e


def _round_upward(x, q, e):
    v = Fraction(x * q, 2 ** (31 - e))
    return math.floor(v + Fraction(1, 2))


def _round_tonearest(x, q, e):
    v = Fraction(x * q, 2 ** (31 - e))
    return int(math.copysign(math.floor(abs(v) + Fraction(1, 2)), v)) if v else 0


def _round_tflite(x, q, e):
    """gemmlowp's SaturatingRoundingDoublingHighMul + RoundingDivideByPOT, one value at a time."""
    left, right = max(e, 0), max(-e, 0)
    x = max(min(x * (1 << left), 2 ** 31 - 1), -2 ** 31)
    ab = x * q
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    high = int((ab + nudge) / 2 ** 31) if abs(ab + nudge) < 2 ** 52 else \
        (abs(ab + nudge) // 2 ** 31) * (1 if ab + nudge >= 0 else -1)
    mask = (1 << right) - 1
    rem = high & mask
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if rem > threshold else 0)


ROUND = {"UPWARD": _round_upward, "TONEAREST": _round_tonearest, "TFLITE": _round_tflite}


@pytest.mark.parametrize("rounding", ["UPWARD", "TONEAREST", "TFLITE"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_requantize_rounding_bit_exact(rounding, per_channel):
    c = 6
    x = RNG.integers(-(1 << 20), 1 << 20, size=(2, c, 5)).astype("int32")
    x[0, 0, :4] = [-(1 << 31) + 5, (1 << 31) - 5, 0, -1]
    # ties: multiplier 0.5 and odd inputs land exactly halfway
    si = np.array([0.5, 0.013, 0.25, 0.0071, 1.7, 3e-5], "float32") if per_channel else np.float32(0.5)
    so = np.float32(1.0)
    zo = -3
    body = qnn.op.requantize(var("x", x), si, 0, so, zo, axis=1, rounding=rounding, out_dtype="int32")
    got, ref = both(body, {"x": x})
    reals = np.broadcast_to(np.asarray(si, np.float64).reshape(-1, 1) if per_channel else np.float64(si), (c, 1))
    want = np.empty(x.shape, np.int64)
    for idx in np.ndindex(*x.shape):
        q, e = _multiplier(float(reals[idx[1], 0]))
        want[idx] = ROUND[rounding](int(x[idx]), q, e) + zo
    want = np.clip(want, -2 ** 31, 2 ** 31 - 1)
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rounding", ["UPWARD", "TONEAREST"])
def test_requantize_ties_differ_by_mode(rounding):
    x = np.array([-5, -3, -1, 1, 3, 5], "int32")
    got, _ = both(qnn.op.requantize(var("x", x), 0.5, 0, 1.0, 0, rounding=rounding, out_dtype="int8"), {"x": x})
    want = {"UPWARD": [-2, -1, 0, 1, 2, 3], "TONEAREST": [-3, -2, -1, 1, 2, 3]}[rounding]
    np.testing.assert_array_equal(got, want)


def test_multiplier_approximates_real():
    reals = np.geomspace(1e-9, 1e3, 200)
    q, e = quantize_multiplier(reals)
    assert np.all((q >= 2 ** 30) & (q < 2 ** 31))
    np.testing.assert_allclose(q * np.exp2(e.astype(float) - 31), reals, rtol=2 ** -30)


def test_requantize_int8_to_uint8_with_zero_points():
    x = ints((4, 33), "int8")
    got, ref = both(qnn.op.requantize(var("x", x), 0.05, -7, 0.11, 128, out_dtype="uint8"), {"x": x})
    want = np.clip(np.floor((x.astype(np.int64) + 7) * (0.05 / 0.11) + 0.5) + 128, 0, 255)
    np.testing.assert_array_equal(got, ref)
    assert np.abs(got.astype(int) - want).max() == 0


# -- quantize / dequantize -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantize_dequantize_per_tensor_and_channel(dtype):
    x = (RNG.standard_normal((2, 3, 4, 5)) * 3).astype("float32")
    x[0, 0, 0, :3] = [0.25, 0.75, -0.25]  # ties at scale 0.5: half to even
    scale = np.array([0.5, 0.03, 0.2], "float32")
    zp = np.array([0, 3, -2], "int32") if dtype == "int8" else np.array([128, 100, 7], "int32")
    q_body = qnn.op.quantize(var("x", x), scale, zp, axis=1, out_dtype=dtype)
    got_q, ref_q = both(q_body, {"x": x})
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    want = np.clip(np.rint(x / scale.reshape(1, 3, 1, 1)) + zp.reshape(1, 3, 1, 1), lo, hi).astype(dtype)
    np.testing.assert_array_equal(got_q, want)
    np.testing.assert_array_equal(ref_q, want)
    d_body = qnn.op.dequantize(var("q", want), scale, zp, axis=1)
    got_d, _ = both(d_body, {"q": want})
    np.testing.assert_array_equal(got_d, (want.astype(np.float32) - zp.astype(np.float32).reshape(1, 3, 1, 1))
                                  * scale.reshape(1, 3, 1, 1))


# -- conv2d / dense / batch_matmul -----------------------------------------------------------------

CONV_CASES = {
    "plain": dict(groups=1, pad=(1, 1, 1, 1), strides=(1, 1), dilation=(1, 1), zx=5, zw=0, cin=8, cout=16),
    "asymmetric_zero_points": dict(groups=1, pad=(1, 0, 2, 1), strides=(2, 1), dilation=(1, 1), zx=-17, zw=3,
                                   cin=6, cout=10),
    "depthwise": dict(groups=8, pad=(1, 1, 1, 1), strides=(1, 1), dilation=(1, 1), zx=3, zw=0, cin=8, cout=8),
    "grouped_dilated": dict(groups=2, pad=(2, 2, 2, 2), strides=(1, 1), dilation=(2, 2), zx=-4, zw=-2, cin=8,
                            cout=12),
}


@pytest.mark.parametrize("data_dtype", ["int8", "uint8"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_exact(case, data_dtype):
    c = CONV_CASES[case]
    zx = c["zx"] + (128 if data_dtype == "uint8" else 0)
    x = ints((1, c["cin"], 9, 8), data_dtype)
    w = ints((c["cout"], c["cin"] // c["groups"], 3, 3), "int8")
    body = qnn.op.conv2d(var("x", x), relay.const(w), zx, c["zw"], 0.1, 0.05, kernel_size=(3, 3),
                         channels=c["cout"], strides=c["strides"], padding=c["pad"], dilation=c["dilation"],
                         groups=c["groups"])
    got, ref = both(body, {"x": x})
    want = np_conv_int(x, w, zx, c["zw"], c["strides"], c["pad"], c["dilation"], c["groups"])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)


def test_conv2d_per_channel_kernel_zero_point_and_requantize():
    x = ints((1, 4, 6, 6), "uint8")
    w = ints((6, 4, 3, 3), "int8")
    zw = np.array([0, 1, -2, 3, 0, -1], "int32")
    ws = np.linspace(0.01, 0.03, 6).astype("float32")
    acc = qnn.op.conv2d(var("x", x), relay.const(w), 120, zw, 0.02, ws, kernel_size=(3, 3), channels=6,
                        padding=(1, 1))
    body = qnn.op.requantize(acc, np.float32(0.02) * ws, 0, 0.4, 10, axis=1, out_dtype="int8")
    got, ref = both(body, {"x": x})
    conv = np_conv_int(x, w, 120, zw, pad=(1, 1, 1, 1))
    real = (np.float64(np.float32(0.02) * ws) / np.float64(np.float32(0.4))).reshape(1, 6, 1, 1)
    want = np.clip(np.floor(conv * real + 0.5) + 10, -128, 127)
    np.testing.assert_array_equal(got, ref)
    assert np.abs(got - want).max() <= 1  # fixed point vs float64 at exact ties only
    assert np.mean(got == want) > 0.99


@pytest.mark.parametrize("zx,zw", [(0, 0), (7, -3), (-100, 2)])
def test_dense_exact(zx, zw):
    x = ints((5, 37), "int8")
    w = ints((11, 37), "int8")
    got, ref = both(qnn.op.dense(var("x", x), relay.const(w), zx, zw, 0.1, 0.1, units=11), {"x": x})
    want = (x.astype(np.int64) - zx) @ (w.astype(np.int64) - zw).T
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("transpose_b", [True, False])
def test_batch_matmul_exact(transpose_b):
    x = ints((2, 4, 9), "uint8")
    y = ints((2, 6, 9) if transpose_b else (2, 9, 6), "int8")
    body = qnn.op.batch_matmul(var("x", x), var("y", y), 131, -5, 0.1, 0.1, transpose_b=transpose_b)
    got, ref = both(body, {"x": x, "y": y})
    yy = np.swapaxes(y, 1, 2) if transpose_b else y
    want = np.matmul(x.astype(np.int64) - 131, yy.astype(np.int64) + 5)
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)


def test_conv2d_transpose_exact():
    x = ints((1, 4, 5, 5), "int8")
    w = ints((4, 3, 3, 3), "int8")  # IOHW
    body = qnn.op.conv2d_transpose(var("x", x), relay.const(w), 3, 1, 0.1, 0.1, strides=(2, 2), padding=(1, 1))
    got, ref = both(body, {"x": x})
    xc, wc = x.astype(np.int64) - 3, w.astype(np.int64) - 1
    full = np.zeros((1, 3, 11, 11), np.int64)
    for i in range(5):
        for j in range(5):
            full[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += np.einsum("c,cokl->okl", xc[0, :, i, j], wc)
    want = full[:, :, 1:10, 1:10]
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)


# -- elementwise ----------------------------------------------------------------------------------

def _upward(v):
    return np.floor(v + 0.5)


@pytest.mark.parametrize("kind", ["add", "subtract", "mul"])
def test_binary_ops(kind):
    a, b = ints((3, 17), "int8"), ints((17,), "int8")
    sa, za, sb, zb, so, zo = 0.05, 3, 0.02, -4, 0.07, 2
    fn = getattr(qnn.op, kind)
    got, ref = both(fn(var("a", a), var("b", b), sa, za, sb, zb, so, zo), {"a": a, "b": b})
    ra = (a.astype(np.int64) - za) * np.float64(np.float32(sa))
    rb = (b.astype(np.int64) - zb) * np.float64(np.float32(sb))
    real = {"add": ra + rb, "subtract": ra - rb, "mul": ra * rb}[kind]
    want = np.clip(_upward(real / np.float64(np.float32(so))) + zo, -128, 127)
    np.testing.assert_array_equal(got, ref)
    # add/subtract round each input once at the output scale (as TVM's qnn.add): one step at most
    assert np.abs(got - want).max() <= (0 if kind == "mul" else 1)


def test_concatenate_requantizes_inputs():
    a, b = ints((2, 3), "int8"), ints((2, 4), "uint8")
    body = qnn.op.concatenate([var("a", a), var("b", b)], [0.1, 0.2], [0, 128], 0.15, -1, axis=1)
    got, ref = both(body, {"a": a, "b": b})
    ra = _upward(a.astype(np.int64) * (np.float64(np.float32(0.1)) / np.float64(np.float32(0.15)))) - 1
    rb = _upward((b.astype(np.int64) - 128) * (np.float64(np.float32(0.2)) / np.float64(np.float32(0.15)))) - 1
    want = np.clip(np.concatenate([ra, rb], axis=1), -128, 127)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, want)


UNARY = {"sigmoid": lambda r: 1 / (1 + np.exp(-r)), "tanh": np.tanh, "exp": np.exp,
         "erf": np.vectorize(math.erf), "hardswish": lambda r: r * np.clip(r + 3, 0, 6) / 6,
         "abs": np.abs}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_unary_lookup_tables(name, dtype):
    x = np.arange(np.iinfo(dtype).min, int(np.iinfo(dtype).max) + 1).astype(dtype).reshape(16, 16)
    si, zi, so, zo = 0.04, (0 if dtype == "int8" else 128), 0.01, (-100 if dtype == "int8" else 20)
    got, ref = both(getattr(qnn.op, name)(var("x", x), si, zi, so, zo), {"x": x})
    real = (x.astype(np.float64) - zi) * np.float64(np.float32(si))
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    want = np.clip(np.rint(UNARY[name](real) / np.float64(np.float32(so))) + zo, lo, hi)
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(got, want)


# -- pools --------------------------------------------------------------------------------------

def test_global_avg_pool_integer():
    x = ints((2, 5, 7, 6), "uint8")
    got, ref = both(qnn.op.global_avg_pool2d(var("x", x), 0.1, 128, 0.05, 120), {"x": x})
    total = (x.astype(np.int64) - 128).sum(axis=(2, 3), keepdims=True)
    want = np.clip(_upward(total * (np.float64(np.float32(0.1)) / np.float64(np.float32(0.05)) / 42)) + 120, 0, 255)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool(count_include_pad):
    x = ints((1, 3, 7, 7), "int8")
    body = qnn.op.avg_pool2d(var("x", x), 0.1, -3, 0.1, -3, pool_size=(3, 3), strides=(2, 2), padding=(1, 1),
                             count_include_pad=count_include_pad)
    got, ref = both(body, {"x": x})
    xp = np.pad(x.astype(np.float64) + 3, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ones = np.pad(np.ones((7, 7)), 1)
    want = np.empty((1, 3, 4, 4))
    for i in range(4):
        for j in range(4):
            win = xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            n = 9 if count_include_pad else ones[2 * i:2 * i + 3, 2 * j:2 * j + 3].sum()
            want[:, :, i, j] = win.sum(axis=(2, 3)) / n
    ideal = np.clip(want - 3, -128, 127)
    # onnxruntime's float32 arithmetic inside (canonicalize._avg_pool2d; tests/relay/qnn/
    # test_onnx_qoperator_ops.py compares with onnxruntime itself): the nearest integer to the
    # exact mean, a tie k + 1/2 either way
    assert np.abs(got - ideal).max() <= 0.5 + 1e-6 and np.abs(ref - ideal).max() <= 0.5 + 1e-6
    np.testing.assert_array_equal(got, ref)


# -- bad quantization parameters -----------------------------------------------------------------

@pytest.mark.parametrize("make,msg", [
    (lambda x: qnn.op.quantize(x, 0.0, 0), "must be finite and > 0"),
    (lambda x: qnn.op.quantize(x, -0.5, 0), "must be finite and > 0"),
    (lambda x: qnn.op.quantize(x, 0.1, 300, out_dtype="int8"), "outside int8"),
    (lambda x: qnn.op.quantize(x, 0.1, -1, out_dtype="uint8"), "outside uint8"),
])
def test_bad_qparams_one_error(make, msg):
    x = relay.var("x", shape=(2, 3), dtype="float32")
    with pytest.raises(ShapeError, match=msg) as info:
        make(x)
    assert "qnn.quantize" in str(info.value) and "\n" not in str(info.value)


def test_per_channel_length_mismatch_names_op():
    x = relay.var("x", shape=(2, 3, 4), dtype="float32")
    with pytest.raises(ShapeError, match=r"qnn.quantize: .*4 values.*3 channels"):
        relay.transform.infer(relay.Function([x], qnn.op.quantize(x, np.ones(4, "float32"), 0, axis=1)))
