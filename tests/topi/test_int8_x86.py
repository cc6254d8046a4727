"""x86 int8 kernels (kiln/topi/x86/conv2d_int8.py) across CPU models: each tier compiled for its
-mcpu, its instruction checked in the assembly, and run where this machine can, exactly against
the numpy int64 reference of the qnn ops (integers: no tolerance). Then an onnxruntime-quantized
model end to end."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay import qnn
from kiln.target.cpu_facts import why_host_cannot_run
from kiln.topi import int8_pack
from kiln.topi.x86.conv2d_int8 import int8_tier

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "relay", "qnn"))
from qnn_run import anchor_ops, module, reference  # noqa: E402

# -mcpu -> (tier, lanes, what its assembly must hold)
CPUS = {
    "haswell": ("pmaddubsw", 8, [r"vpmaddubsw\s.*%ymm", r"vpmaddwd\s.*%ymm"]),
    "znver3": ("pmaddubsw", 8, [r"vpmaddubsw\s.*%ymm", r"vpmaddwd\s.*%ymm"]),
    "skylake-avx512": ("pmaddubsw", 16, [r"vpmaddubsw\s.*%zmm", r"vpmaddwd\s.*%zmm"]),
    "cascadelake": ("vnni", 16, [r"^\s*vpdpbusd\s.*%zmm"]),
    "icelake-server": ("vnni", 16, [r"^\s*vpdpbusd\s.*%zmm"]),
    "alderlake": ("vnni", 8, [r"\{vex\}\s*vpdpbusd\s.*%ymm"]),
    "sierraforest": ("vnni", 8, [r"\{vex\}\s*vpdpbusd\s.*%ymm"]),
    "sapphirerapids": ("vnni", 16, [r"^\s*vpdpbusd\s.*%zmm"]),
}


def host_runs(target: str) -> bool:
    """Whether code for ``target`` runs here (kiln.target.cpu_facts.why_host_cannot_run)."""
    return not why_host_cannot_run(target)


def conv_graph(rng, wmax=127, ic=12, oc=32, hw=9, stride=1, zx=37, dense_units=10):
    """quantize -> qnn.conv2d (per-channel s8 weights, bias) -> requantize (u8) -> qnn.dense -> requantize."""
    x = relay.var("x", shape=(1, ic, hw, hw), dtype="uint8")
    w = rng.integers(-wmax, wmax + 1, (oc, ic, 3, 3)).astype("int8")
    ws = rng.uniform(0.002, 0.01, oc).astype("float32")
    conv = qnn.op.conv2d(x, relay.const(w), relay.const(zx), relay.const(0), relay.const(0.05),
                         relay.const(ws), kernel_size=(3, 3), channels=oc, padding=(1, 1), strides=(stride, stride))
    conv = relay.nn.bias_add(conv, relay.const(rng.integers(-3000, 3000, oc).astype("int32")))
    y = qnn.op.requantize(conv, relay.const(0.05 * ws), relay.const(0), relay.const(0.08), relay.const(11),
                          axis=1, out_dtype="uint8")
    flat = relay.reshape(y, (1, -1))
    k = int(np.prod([oc, (hw - 1) // stride + 1, (hw - 1) // stride + 1]))
    wd = rng.integers(-wmax, wmax + 1, (dense_units, k)).astype("int8")
    d = qnn.op.dense(flat, relay.const(wd), relay.const(11), relay.const(0), relay.const(0.08),
                     relay.const(np.float32(0.004)), units=dense_units)
    d = relay.add(d, relay.const(rng.integers(-500, 500, dense_units).astype("int32")))
    out = qnn.op.requantize(d, relay.const(np.float32(0.08 * 0.004)), relay.const(0), relay.const(0.3),
                            relay.const(-5), out_dtype="int8")
    return module(relay.Tuple([y, out])), {"x": rng.integers(0, 256, (1, ic, hw, hw)).astype("uint8")}


def _build(mod, target):
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=tvm.target.Target(target))


def _run(lib, inputs):
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


@pytest.mark.parametrize("mcpu", sorted(CPUS))
def test_tier_instruction_and_exact_result(mcpu):
    tier, lanes, patterns = CPUS[mcpu]
    target = f"llvm -mcpu={mcpu}"
    assert int8_tier(target)[0] == ("vnni" if tier == "vnni" else "pmaddubsw"), int8_tier(target)
    rng = np.random.default_rng(len(mcpu))
    # 7-bit weights: vpmaddubsw's 16-bit pair sums are exact, so the non-VNNI tiers use it
    mod, inputs = conv_graph(rng, wmax=64, stride=1 + len(mcpu) % 2)
    lib = _build(mod, target)
    assert {op for op, _, _ in anchor_ops(lib)} == {"nn.contrib_conv2d_int8", "nn.contrib_dense_int8"}
    asm = lib.get_lib().get_source("asm")
    for pattern in patterns:
        assert re.search(pattern, asm, re.M), f"{mcpu}: no {pattern} in the kernels"
    if not host_runs(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (checked its assembly only)")
    for got, want in zip(_run(lib, inputs), reference(mod, inputs)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mcpu", ["haswell", "skylake-avx512"])
def test_full_range_weights_take_the_exact_16_bit_path(mcpu):
    """|w0| + |w1| > 128 would saturate vpmaddubsw: such weights go to vpmaddwd on int16."""
    target = f"llvm -mcpu={mcpu}"
    rng = np.random.default_rng(3)
    mod, inputs = conv_graph(rng, wmax=127)
    lib = _build(mod, target)
    asm = lib.get_lib().get_source("asm")
    assert "vpmaddwd" in asm and "vpmaddubsw" not in asm
    if not host_runs(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (checked its assembly only)")
    for got, want in zip(_run(lib, inputs), reference(mod, inputs)):
        np.testing.assert_array_equal(got, want)



def int8_tiers(lib) -> set:
    """The ``tier`` of every CPU int8 conv in the built graph."""
    from kiln.relay.expr import Function
    from kiln.relay.visitor import ExprVisitor

    found = set()

    class V(ExprVisitor):
        def visit_Call(self, call):
            super().visit_Call(call)
            if isinstance(call.op, Function):
                self.visit(call.op)
            if getattr(call.op, "name", "") in ("nn.contrib_conv2d_int8", "nn.contrib_conv2d_int8_mixed"):
                found.add(call.attrs.tier)
    V().visit(lib.ir_mod["main"])
    return found


@pytest.mark.parametrize("mcpu,hw,ic,zx", [("znver3", 9, 12, 37), ("haswell", 14, 64, 0),
                                           ("skylake-avx512", 7, 32, 200)])
def test_3x3_convs_without_vnni_take_exact_int16_winograd(mcpu, hw, ic, zx):
    """Without VNNI a 3x3 stride-1 conv runs as Winograd F(2x2, 3x3) on int16 (vpmaddwd): the
    transformed data and weights fit int16 and the sums int32, so the result is the direct
    conv's bit for bit (odd and even sizes, padding with a non-zero zero point); the switch
    relay.qnn.int8_winograd=False keeps the direct kernel, with the same bytes."""
    from kiln.topi.x86.conv2d_int8_winograd import pack_weight, unpack_weight

    target = f"llvm -mcpu={mcpu}"
    rng = np.random.default_rng(hw)
    w = rng.integers(-128, 128, (16, 8, 3, 3)).astype(np.int8)
    np.testing.assert_array_equal(unpack_weight(pack_weight(w, 8, 8)), w)
    mod, inputs = conv_graph(rng, wmax=127, ic=ic, hw=hw, zx=zx)
    lib = _build(mod, target)
    assert int8_tiers(lib) == {"wino16"}
    assert "vpmaddwd" in lib.get_lib().get_source("asm")
    with tvm.transform.PassContext(opt_level=3, config={"relay.qnn.int8_winograd": False}):
        direct = relay.build(mod, target=tvm.target.Target(target))
    assert int8_tiers(direct) == {"pmaddwd"}
    if not host_runs(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (checked its assembly only)")
    got = _run(lib, inputs)
    for g, d, want in zip(got, _run(direct, inputs), reference(mod, inputs)):
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(d, want)


def test_winograd_is_not_used_where_its_sums_could_overflow():
    """int32 sums of 16-bit products: C * 1020 * 1152 must stay below 2**31 (C <= 1827)."""
    from kiln.topi.x86.conv2d_int8_winograd import applies

    assert applies((3, 3), (1, 1), (1, 1), 1824) and not applies((3, 3), (1, 1), (1, 1), 1828)
    assert not applies((3, 3), (2, 2), (1, 1), 64) and not applies((1, 1), (1, 1), (1, 1), 64)

def test_same_integers_as_the_canonical_path():
    """The int8 kernels and CanonicalizeOps' plain integer ops give the same bytes (host CPU)."""
    rng = np.random.default_rng(9)
    mod, inputs = conv_graph(rng, ic=3, oc=16, hw=11, stride=2, zx=0)
    fast = _run(_build(mod, "llvm"), inputs)
    with tvm.transform.PassContext(opt_level=3, config={"relay.qnn.int8_kernels": False}):
        plain = _run(relay.build(mod, target="llvm"), inputs)
    for a, b, want in zip(fast, plain, reference(mod, inputs)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, want)


def tflite_gemm_graph(rng, rounding="GEMM"):
    """int8 (TFLite's scheme) 1x1 conv -> depthwise 3x3 -> dense, each rescaled as the TFLite
    importer writes its convolutions (frontend/tflite/quantize.py: ``GEMM``, two qnn.requantize,
    two roundings half up) or, with ``rounding="UPWARD"``, once. Multipliers per channel in
    [0.2, 1) (ties at the second rounding are frequent; a fifth of that for the dense),
    [2**-12, 2**-4) and, every third channel, 0.5, 0.75, 0.375 or 0.3125 (ties at any rounding);
    small values keep the large multipliers from saturating most outputs."""
    from kiln.relay.frontend.tflite import quantize as TQ

    def reals(n):  # every third channel a multiplier of few bits: ties at the single rounding too
        r = np.where(np.arange(n) % 2 == 0, rng.uniform(0.2, 1.0, n), np.exp2(rng.uniform(-12, -4, n)))
        return np.where(np.arange(n) % 3 == 2, rng.choice([0.5, 0.75, 0.375, 0.3125], n), r)

    def rescale(acc, real, zo, axis=1):
        return TQ.requantize(acc, real, zo, "int8", axis=axis if np.size(real) > 1 else -1, rounding=rounding)

    x = relay.var("x", shape=(1, 8, 10, 10), dtype="int8")
    w1 = rng.integers(-9, 10, (16, 8, 1, 1)).astype("int8")
    y = qnn.op.conv2d(x, relay.const(w1), relay.const(-3), relay.const(0), relay.const(0.05),
                      relay.const(np.full(16, 0.01, "float32")), kernel_size=(1, 1), channels=16)
    y = relay.nn.bias_add(y, relay.const(rng.integers(-40, 40, 16).astype("int32")))
    y = rescale(y, reals(16), 5)
    w2 = rng.integers(-9, 10, (16, 1, 3, 3)).astype("int8")
    y = qnn.op.conv2d(y, relay.const(w2), relay.const(5), relay.const(0), relay.const(0.05),
                      relay.const(np.full(16, 0.01, "float32")), kernel_size=(3, 3), channels=16, groups=16,
                      padding=(1, 1))
    y = relay.nn.bias_add(y, relay.const(rng.integers(-40, 40, 16).astype("int32")))
    y = rescale(y, reals(16), -7)
    wd = rng.integers(-1, 2, (32, 100)).astype("int8")
    d = qnn.op.dense(relay.reshape(y, (16, 100)), relay.const(wd), relay.const(-7), relay.const(0),
                     relay.const(0.05), relay.const(np.float32(0.01)), units=32)
    d = rescale(relay.add(d, relay.const(rng.integers(-40, 40, 32).astype("int32"))), reals(32) / 5, 2)
    return module(relay.Tuple([y, d])), {"x": rng.integers(-7, 2, (1, 8, 10, 10)).astype("int8")}


@pytest.mark.parametrize("mcpu,rounding", [("haswell", "GEMM"), ("cascadelake", "GEMM"), ("alderlake", "GEMM"),
                                            ("haswell", "UPWARD"), ("skylake-avx512", "TONEAREST")])
def test_tflite_two_rounding_rescale_fused_into_the_int8_kernels(mcpu, rounding):
    """TFLite's conv / depthwise / fully connected rescale (two roundings) runs in the int8
    kernels' epilogue (rounding GEMM), with the reference executor's integers; the test data
    tell it from one rounding. One rounding (UPWARD, TONEAREST) of the same multipliers (shifts
    31 to 43: the kernels' split form, ``requantize_epilogue``) gives the reference's integers too."""
    target = f"llvm -mcpu={mcpu}"
    mod, inputs = tflite_gemm_graph(np.random.default_rng(4), rounding)
    lib = _build(mod, target)
    assert {op for op, _, _ in anchor_ops(lib)} == {"nn.contrib_conv2d_int8", "nn.contrib_depthwise_conv2d_int8",
                                                    "nn.contrib_dense_int8"}
    want = reference(mod, inputs)
    if rounding == "GEMM":
        once = reference(tflite_gemm_graph(np.random.default_rng(4), "UPWARD")[0], inputs)
        assert all((w != o).sum() >= 3 for w, o in zip(want, once)), "the data should tell two roundings from one"
    if not host_runs(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (built only)")
    for got, w in zip(_run(lib, inputs), want):
        np.testing.assert_array_equal(got, w)


def test_pairs_fit_int16():
    assert int8_pack.pairs_fit_int16(np.array([[64, 64, -128, 0]]), 1)
    assert not int8_pack.pairs_fit_int16(np.array([[64, 65, 0, 0]]), 1)
    assert not int8_pack.pairs_fit_int16(np.array([[0, 0, -100, -29]]), 1)


def test_pair_fits_is_vpmaddubsw_without_saturation():
    """pair_fits(w0, w1) exactly when u0 * w0 + u1 * w1 stays in int16 for all u8 u0, u1 (the
    extremes are u = 255 on the weights of one sign): opposite signs always fit."""
    w = np.arange(-128, 128)
    w0, w1 = np.meshgrid(w, w)
    hi = 255 * (np.maximum(w0, 0) + np.maximum(w1, 0))
    lo = 255 * (np.minimum(w0, 0) + np.minimum(w1, 0))
    np.testing.assert_array_equal(int8_pack.pair_fits(w0, w1), (hi <= 32767) & (lo >= -32768))
    assert int8_pack.pairs_fit_int16(np.array([[127, -128, -128, 0, 64, 64]]), 1)


def mixed_graph(rng, ic, oc, hw, k, stride, zx, rounding):
    """quantize -> qnn.conv2d with weights ~ N(0, 40) (int8, as onnxruntime's per-channel ones:
    some 4-channel units fit vpmaddubsw, some do not) -> requantize (u8)."""
    x = relay.var("x", shape=(1, ic, hw, hw), dtype="uint8")
    w = np.clip(rng.normal(0, 40, (oc, ic, k, k)), -127, 127).astype("int8")
    ws = rng.uniform(0.002, 0.01, oc).astype("float32")
    conv = qnn.op.conv2d(x, relay.const(w), relay.const(zx), relay.const(0), relay.const(0.05), relay.const(ws),
                         kernel_size=(k, k), channels=oc, padding=(k // 2,) * 2, strides=(stride, stride))
    conv = relay.nn.bias_add(conv, relay.const(rng.integers(-3000, 3000, oc).astype("int32")))
    y = qnn.op.requantize(conv, relay.const(0.05 * ws), relay.const(0), relay.const(0.5), relay.const(11),
                          axis=1, out_dtype="uint8", rounding=rounding)
    return module(y), {"x": rng.integers(0, 256, (1, ic, hw, hw)).astype("uint8")}, w


@pytest.mark.parametrize("mcpu,ic,oc,hw,k,stride,zx,rounding", [
    ("znver3", 64, 32, 9, 1, 1, 0, "FLOAT32"), ("haswell", 32, 16, 11, 3, 2, 37, "UPWARD"),
    ("haswell", 64, 32, 10, 1, 2, 5, "TONEAREST"), ("skylake-avx512", 64, 32, 7, 1, 1, 3, "FLOAT32")])
def test_mixed_conv_units_on_vpmaddubsw_and_vpmaddwd_exact(mcpu, ic, oc, hw, k, stride, zx, rounding):
    """Weights of which only some units fit vpmaddubsw: each output block runs those on it and the
    others on int16 vpmaddwd (the mixed tier); the bytes equal the reference's and the all-16-bit
    build's (relay.qnn.int8_mixed=False); the weight parts unpack to the weights."""
    from kiln.relay.qnn.cpu_int8 import CONV2D_INT8_MIXED  # noqa: F401 (the op)

    target = f"llvm -mcpu={mcpu}"
    rng = np.random.default_rng(ic + k + stride)
    mod, inputs, w = mixed_graph(rng, ic, oc, hw, k, stride, zx, rounding)
    lanes = int8_tier(target)[1]
    parts = int8_pack.plan_mixed_conv_weight(w, 8, lanes)
    assert parts is not None and 0 < parts[0].shape[1] < parts[2].shape[1]
    np.testing.assert_array_equal(int8_pack.unpack_mixed_conv_weight(*parts, w.shape, 8), w)
    units = parts[0].astype(np.int32)
    assert np.all(int8_pack.pair_fits(units[..., 0::2], units[..., 1::2]))
    lib = _build(mod, target)
    assert int8_tiers(lib) == {"mixed"}
    asm = lib.get_lib().get_source("asm")
    assert "vpmaddubsw" in asm and "vpmaddwd" in asm
    with tvm.transform.PassContext(opt_level=3, config={"relay.qnn.int8_mixed": False}):
        wide = relay.build(mod, target=tvm.target.Target(target))
    assert int8_tiers(wide) == {"pmaddwd"}
    if not host_runs(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (checked its assembly only)")
    want = reference(mod, inputs)[0]
    np.testing.assert_array_equal(_run(lib, inputs)[0], want)
    np.testing.assert_array_equal(_run(wide, inputs)[0], want)


def test_packed_weights_round_trip():
    from kiln.relay.qnn.cpu_int8 import _unpack_conv_weight, _unpack_dense_weight
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (32, 16, 3, 3)).astype("int8")
    for pairs, tier in ((False, "vnni"), (True, "pmaddwd")):
        packed = int8_pack.pack_conv_weight(w, 8, 16, pairs)
        np.testing.assert_array_equal(_unpack_conv_weight(packed, tier), w)
        d = w.reshape(32, -1)
        np.testing.assert_array_equal(_unpack_dense_weight(int8_pack.pack_dense_weight(d, 8, pairs), tier), d)


def test_channel_order_for_pairs_is_a_cheaper_permutation():
    """The input-channel order for vpmaddubsw is a permutation under which the kernel's count of
    instructions (``mixed_cost``) drops; ``mixed_cost`` is the plan's share (3 per vpmaddubsw unit,
    4 per 16-bit unit)."""
    rng = np.random.default_rng(3)
    w = np.clip(rng.normal(0, 40, (32, 64, 1, 1)), -127, 127).astype("int8")
    order = int8_pack.channel_order_for_pairs(w, 8)
    assert order is not None and sorted(order) == list(range(64))
    assert int8_pack.mixed_cost(w[:, order], 8) < int8_pack.mixed_cost(w, 8)
    for v in (w, w[:, order]):
        parts = int8_pack.plan_mixed_conv_weight(v, 8, 8)  # None: all units fit, or too few
        ns = parts[0].shape[1] if parts else 16 if int8_pack.pairs_fit_int16(v, 1) else 0
        assert int8_pack.mixed_cost(v, 8) == 3 * ns + 4 * (16 - ns)
    assert int8_pack.channel_order_for_pairs(np.ones((8, 8, 1, 1), "int8"), 8) is None  # all fit already


def chained_graph(rng, ic, mid, oc, hw, zx, rounding):
    """quantize -> 1x1 qnn.conv2d -> requantize (u8) -> 1x1 qnn.conv2d -> requantize: the middle
    tensor has one reader, so its channels may be stored in another order."""
    x = relay.var("x", shape=(1, ic, hw, hw), dtype="uint8")
    y, scale, ws = x, 0.05, []
    for cin, cout, zp in ((ic, mid, zx), (mid, oc, 9)):
        w = np.clip(rng.normal(0, 40, (cout, cin, 1, 1)), -127, 127).astype("int8")
        s = rng.uniform(0.002, 0.01, cout).astype("float32")
        conv = qnn.op.conv2d(y, relay.const(w), relay.const(zp), relay.const(0), relay.const(scale),
                             relay.const(s), kernel_size=(1, 1), channels=cout)
        conv = relay.nn.bias_add(conv, relay.const(rng.integers(-3000, 3000, cout).astype("int32")))
        y = qnn.op.requantize(conv, relay.const(scale * s), relay.const(0), relay.const(0.5), relay.const(9),
                              axis=1, out_dtype="uint8", rounding=rounding)
        scale = 0.5
        ws.append(w)
    return module(y), {"x": rng.integers(0, 256, (1, ic, hw, hw)).astype("uint8")}, ws


@pytest.mark.parametrize("mcpu,rounding", [("haswell", "FLOAT32"), ("znver3", "UPWARD"),
                                           ("skylake-avx512", "TONEAREST")])
def test_channels_between_two_convs_reordered_for_vpmaddubsw_exact(mcpu, rounding):
    """Without VNNI a conv read by one conv only writes its channels in the order that lets more of
    the reader's units fit vpmaddubsw (relay.qnn.int8_permute): the reader's weights are the
    columns of the original in that order, and the bytes equal the reference's and those of the
    build without the reordering."""
    from kiln.relay.qnn.cpu_int8 import permute_for_vpmaddubsw
    from kiln.relay.transform.infer_type import infer

    target = f"llvm -mcpu={mcpu}"
    lanes = int8_tier(target)[1]
    rng = np.random.default_rng(5)
    mod, inputs, (w1, w2) = chained_graph(rng, 16, 64, 32, 6, 3, rounding)
    order = int8_pack.channel_order_for_pairs(w2, lanes)
    assert order is not None
    weights = _conv_weights(permute_for_vpmaddubsw(infer(mod["main"]), lanes))
    np.testing.assert_array_equal(weights[0], w1[order])
    np.testing.assert_array_equal(weights[1], w2[:, order])
    _exact_with_and_without_reorder(mod, inputs, target)


def _exact_with_and_without_reorder(mod, inputs, target):
    """``mod`` built for ``target`` with and without relay.qnn.int8_permute gives the reference's
    bytes (both built; run where the host can)."""
    lib = _build(mod, target)
    with tvm.transform.PassContext(opt_level=3, config={"relay.qnn.int8_permute": False}):
        plain = relay.build(mod, target=tvm.target.Target(target))
    if not host_runs(target):
        pytest.skip(f"{target}: {why_host_cannot_run(target)} (built only)")
    want = reference(mod, inputs)[0]
    np.testing.assert_array_equal(_run(lib, inputs)[0], want)
    np.testing.assert_array_equal(_run(plain, inputs)[0], want)


def _conv_q(rng, y, cin, cout, scale, zp, rounding, k=1):
    """qnn.conv2d (weights ~ N(0, 40)) + bias + requantize to u8 (scale 0.5, zero point 9)."""
    w = np.clip(rng.normal(0, 40, (cout, cin, k, k)), -127, 127).astype("int8")
    s = rng.uniform(0.002, 0.01, cout).astype("float32")
    conv = qnn.op.conv2d(y, relay.const(w), relay.const(zp), relay.const(0), relay.const(scale), relay.const(s),
                         kernel_size=(k, k), channels=cout, padding=(k // 2,) * 2)
    conv = relay.nn.bias_add(conv, relay.const(rng.integers(-3000, 3000, cout).astype("int32")))
    return qnn.op.requantize(conv, relay.const(scale * s), relay.const(0), relay.const(0.5), relay.const(9), axis=1,
                             out_dtype="uint8", rounding=rounding), w


def _conv_weights(func) -> list:
    from kiln.relay.visitor import ExprVisitor

    found = []

    class V(ExprVisitor):
        def visit_Call(self, call):
            super().visit_Call(call)
            if getattr(call.op, "name", "") == "qnn.conv2d":
                found.append(call.args[1].data)
    V().visit(func)
    return found


@pytest.mark.parametrize("mcpu,rounding", [("haswell", "FLOAT32"), ("skylake-avx512", "UPWARD")])
def test_residual_sum_of_two_convs_read_by_a_conv_reordered_exact(mcpu, rounding):
    """Two convs summed by qnn.add (a residual stream), then max-pooled and read by one conv: both
    producers write their channels in the reader's order for vpmaddubsw, the sum and the pool keep
    it; a conv whose output is the result keeps its order. Exact, as without the reordering."""
    from kiln.relay.qnn.cpu_int8 import permute_for_vpmaddubsw
    from kiln.relay.transform.infer_type import infer

    target = f"llvm -mcpu={mcpu}"
    lanes = int8_tier(target)[1]
    rng = np.random.default_rng(8)
    x = relay.var("x", shape=(1, 16, 8, 8), dtype="uint8")
    a, wa = _conv_q(rng, x, 16, 64, 0.05, 3, rounding)
    b, wb = _conv_q(rng, x, 16, 64, 0.05, 3, rounding, k=3)
    sum_ = qnn.op.add(a, b, relay.const(0.5), relay.const(9), relay.const(0.5), relay.const(9), relay.const(0.7),
                      relay.const(4))
    pooled = relay.nn.max_pool2d(sum_, pool_size=(2, 2), strides=(2, 2))
    out, wc = _conv_q(rng, pooled, 64, 32, 0.7, 4, rounding)
    mod = module(out)
    inputs = {"x": rng.integers(0, 256, (1, 16, 8, 8)).astype("uint8")}
    order = int8_pack.channel_order_for_pairs(wc, lanes)
    assert order is not None
    got = _conv_weights(permute_for_vpmaddubsw(infer(mod["main"]), lanes))
    assert len(got) == 3
    by_shape = {w.shape: w for w in got}
    np.testing.assert_array_equal(by_shape[wa.shape], wa[order])
    np.testing.assert_array_equal(by_shape[wb.shape], wb[order])
    np.testing.assert_array_equal(by_shape[wc.shape], wc[:, order])  # its own rows: the result's order
    _exact_with_and_without_reorder(mod, inputs, target)


# -- an onnxruntime-quantized model ---------------------------------------------------------------

def small_cnn(seed=0):
    """conv3x3(3->16) relu, conv3x3/2(16->32) relu, conv1x1 + residual add, relu, depthwise 3x3,
    global pool, gemm: float ONNX with random weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv(name, x, cin, cout, k, s, relu=True, group=1):
        w = (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2 / (cin // group * k * k))).astype("float32")
        inits.extend([numpy_helper.from_array(w, name + "_w"),
                      numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype("float32"), name + "_b")])
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], pads=[k // 2] * 4,
                                      strides=[s, s], group=group))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [name + "_r"]))
        return name + "_r"

    y = conv("c1", "x", 3, 16, 3, 1)
    y = conv("c2", y, 16, 32, 3, 2)
    z = conv("c3", y, 32, 32, 1, 1, relu=False)
    nodes += [helper.make_node("Add", [z, y], ["a1"]), helper.make_node("Relu", ["a1"], ["a1r"])]
    y = conv("dw", "a1r", 32, 32, 3, 1, group=32)
    nodes += [helper.make_node("GlobalAveragePool", [y], ["gap"]), helper.make_node("Flatten", ["gap"], ["fl"])]
    inits += [numpy_helper.from_array((rng.standard_normal((10, 32)) * 0.2).astype("float32"), "fc_w"),
              numpy_helper.from_array(np.zeros(10, "float32"), "fc_b")]
    nodes.append(helper.make_node("Gemm", ["fl", "fc_w", "fc_b"], ["out"], transB=1))
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_onnxruntime_quantized_model_close_to_onnxruntime(tmp_path):
    """kiln's int8 kernels give the bytes of kiln's canonical integer path, and the model's output
    is within one output step of onnxruntime's: the ONNX importer selects onnxruntime's rounding
    (FLOAT32: a float32 product rounded half to even, QLinearAdd's float expression; measured:
    equal). Full-range weights: onnxruntime runs them exactly where it has VNNI; on AVX2 its
    vpmaddubsw pair sums saturate, so there only the kernels-vs-canonical check is made."""
    import onnx
    ort = pytest.importorskip("onnxruntime")
    from onnxruntime import quantization as oq

    rng = np.random.default_rng(1)

    class Reader(oq.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype("float32")} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(small_cnn(), src)
    oq.quantize_static(src, dst, Reader(), quant_format=oq.QuantFormat.QDQ, per_channel=True,
                       activation_type=oq.QuantType.QUInt8, weight_type=oq.QuantType.QInt8)
    qmodel = onnx.load(dst)
    out_dq = next(n for n in qmodel.graph.node if n.output[0] == "out")
    step = float(next(onnx.numpy_helper.to_array(i) for i in qmodel.graph.initializer if i.name == out_dq.input[1]))
    mod, params = relay.frontend.from_onnx(qmodel, {"x": (1, 3, 16, 16)})
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    assert {op for op, _, _ in anchor_ops(lib)} == {"nn.contrib_conv2d_int8", "nn.contrib_depthwise_conv2d_int8",
                                                    "nn.contrib_dense_int8"}
    with tvm.transform.PassContext(opt_level=3, config={"relay.qnn.int8_kernels": False}):
        plain = relay.build(mod, target="llvm", params=params)
    sess = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
    exact_ort = not why_host_cannot_run("llvm -mcpu=cascadelake")  # VNNI: onnxruntime sums exactly
    for trial in range(3):
        x = rng.standard_normal((1, 3, 16, 16)).astype("float32")
        got = _run(lib, {"x": x})[0]
        np.testing.assert_array_equal(got, _run(plain, {"x": x})[0])
        want = sess.run(None, {"x": x})[0]
        if exact_ort:
            assert np.abs(got - want).max() <= step * 1.001, (np.abs(got - want).max() / step)


def _run_exactly_on_amx(lib, mod, inputs, target):
    """Run ``lib`` against the reference where the host can (its CPU and Linux's AMX tile grant);
    else the caller's assembly checks stand alone."""
    reason = why_host_cannot_run(target)
    if reason:
        pytest.skip(f"-mcpu={target.split('=')[-1]}: {reason} (checked its assembly only)")
    from kiln.runtime import amx
    if not amx.request_permission():
        pytest.skip("Linux does not grant this process the AMX tile state (kernel < 5.16?)")
    for got, want in zip(_run(lib, inputs), reference(mod, inputs)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("stride,hw,oc", [(1, 16, 32), (2, 17, 32), (1, 7, 64)])
def test_amx_tiles_exact(stride, hw, oc):
    """-mcpu=sapphirerapids (AMX-INT8): convs with >= 128 input channels run on tdpbusd tiles
    (two runs of a row's pixels x two 16-channel pieces per step; 16 runs of 16 pixels, 9 of 9
    and 7 of 7: an odd count repeats its last run; 32 channels: one pair of pieces, 64: two),
    exact; the kernel asks Linux for the tile state itself (kiln/runtime/amx.py)."""
    target = "llvm -mcpu=sapphirerapids"
    rng = np.random.default_rng(stride + hw)
    mod, inputs = conv_graph(rng, ic=128, oc=oc, hw=hw, stride=stride, zx=129)
    lib = _build(mod, target)
    asm = lib.get_lib().get_source("asm")
    assert re.search(r"^\s*tdpbusd\s", asm, re.M) and "ldtilecfg" in asm and "tilerelease" in asm
    _run_exactly_on_amx(lib, mod, inputs, target)


@pytest.mark.parametrize("rows,k,n", [(32, 256, 64), (48, 190, 96)])
def test_amx_dense_exact(rows, k, n):
    """A dense of >= 16 rows and >= 128 inputs runs on the AMX conv's tdpbusd tiles (the rows as
    the pixels of a 1 x M image), exact against the reference; an odd K is padded to 4 with zero
    weights (190 -> 192: 64-byte A rows)."""
    target = "llvm -mcpu=sapphirerapids"
    rng = np.random.default_rng(rows)
    x = relay.var("x", shape=(rows, k), dtype="uint8")
    w = rng.integers(-128, 128, (n, k)).astype("int8")
    ws = rng.uniform(0.002, 0.01, n).astype("float32")
    d = qnn.op.dense(x, relay.const(w), relay.const(7), relay.const(0), relay.const(0.05), relay.const(ws), units=n)
    d = relay.nn.bias_add(d, relay.const(rng.integers(-3000, 3000, n).astype("int32")), axis=1)
    y = qnn.op.requantize(d, relay.const(0.05 * ws), relay.const(0), relay.const(0.3), relay.const(11), axis=1,
                          out_dtype="uint8", rounding="FLOAT32")
    mod = module(y)
    inputs = {"x": rng.integers(0, 256, (rows, k)).astype("uint8")}
    lib = _build(mod, target)
    assert {op for op, _, _ in anchor_ops(lib)} == {"nn.contrib_conv2d_int8"}
    asm = lib.get_lib().get_source("asm")
    assert re.search(r"^\s*tdpbusd\s", asm, re.M) and "ldtilecfg" in asm
    _run_exactly_on_amx(lib, mod, inputs, target)


@pytest.mark.parametrize("mcpu,tb,ydtype,zx,zy,k", [("cascadelake", True, "uint8", 3, 130, 64),
                                                   ("alderlake", False, "int8", 0, -5, 30),
                                                   ("sapphirerapids", True, "uint8", 128, 0, 48)])
def test_batch_matmul_of_two_activations_on_vpdpbusd(mcpu, tb, ydtype, zx, zy, k):
    """qnn.batch_matmul (attention's Q K^T): y packed per call to s8 (a u8 y shifted by 128), the
    raw products on vpdpbusd, the zero-point terms as relay ops: the canonical path's int32 exactly
    (K not a multiple of 4 padded, u8 and s8 y, zero points zero or not), and its requantize."""
    target = f"llvm -mcpu={mcpu}"
    rng = np.random.default_rng(k)
    b, m, n = 2, 12, 32
    x = relay.var("x", shape=(b, m, k), dtype="uint8")
    y = relay.var("y", shape=(b, n, k) if tb else (b, k, n), dtype=ydtype)
    mm = qnn.op.batch_matmul(x, y, relay.const(zx), relay.const(zy), relay.const(0.05), relay.const(0.02),
                             transpose_b=tb)
    out = qnn.op.requantize(mm, relay.const(0.001), relay.const(0), relay.const(0.3), relay.const(11),
                            out_dtype="uint8", rounding="FLOAT32")
    mod = module(relay.Tuple([mm, out]))
    info = np.iinfo(ydtype)
    inputs = {"x": rng.integers(0, 256, (b, m, k)).astype("uint8"),
              "y": rng.integers(info.min, info.max + 1, (b, n, k) if tb else (b, k, n)).astype(ydtype)}
    lib = _build(mod, target)
    assert [op for op, _, _ in anchor_ops(lib)] == ["nn.contrib_batch_matmul_int8"]
    pattern = CPUS[mcpu][2][0]
    assert re.search(pattern, lib.get_lib().get_source("asm"), re.M), pattern
    if not host_runs(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (checked its assembly only)")
    for got, want in zip(_run(lib, inputs), reference(mod, inputs)):
        np.testing.assert_array_equal(got, want)

def test_amx_can_be_turned_off():
    rng = np.random.default_rng(0)
    mod, _ = conv_graph(rng, ic=128, oc=32, hw=16)
    with tvm.transform.PassContext(opt_level=3, config={"relay.qnn.int8_amx": False}):
        lib = relay.build(mod, target="llvm -mcpu=sapphirerapids")
    asm = lib.get_lib().get_source("asm")
    assert "tdpbusd" not in asm and re.search(r"^\s*vpdpbusd\s.*%zmm", asm, re.M)


# -- AutoTVM ----------------------------------------------------------------------------------------

def test_autotvm_tasks_have_the_untuned_tile_as_default_and_a_tuned_log_builds_exact(tmp_path):
    from kiln import autotvm
    from kiln.autotvm import record
    from kiln.autotvm.tuner import GridSearchTuner
    from kiln.topi.x86.conv2d_int8 import default_tile_ow

    rng = np.random.default_rng(4)
    mod, inputs = conv_graph(rng, ic=12, oc=32, hw=12)
    target = "llvm -mcpu=cascadelake"
    tasks = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    names = sorted(t.name for t in tasks)
    assert names == ["conv2d_int8.x86", "dense_int8.x86"], names
    conv = next(t for t in tasks if t.name == "conv2d_int8.x86")
    space = conv.config_space
    default = space.get(space.default_index())
    assert default["tile_ow"].val == default_tile_ow(12, 16) == 6
    assert sorted(e.val for e in space.space_map["tile_ow"].entities) == [1, 2, 3, 4, 6, 12]
    if why_host_cannot_run(target):
        pytest.skip(f"{target}: {why_host_cannot_run(target)}")
    log = str(tmp_path / "int8.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=1, timeout=60),
                                    runner=autotvm.LocalRunner(number=2, repeat=1, timeout=60, cooldown_interval=0,
                                                               check_correctness=True))
    GridSearchTuner(conv).tune(n_trial=3, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    rows = list(record.load_from_file(log))
    assert len(rows) == 3 and all(r.error_no == 0 for _, r in rows), rows
    with autotvm.apply_history_best(log):
        lib = _build(mod, target)
    for got, want in zip(_run(lib, inputs), reference(mod, inputs)):
        np.testing.assert_array_equal(got, want)


def test_batch_matmul_int8_autotvm_task_default_and_tuned_log(tmp_path):
    """qnn.batch_matmul's int8 kernel is an AutoTVM task (batch_matmul_int8.x86, knob tile_m) whose
    declared default is the untuned tile; a tuned log builds and stays exact."""
    from kiln import autotvm
    from kiln.autotvm import record
    from kiln.autotvm.tuner import GridSearchTuner
    from kiln.topi.x86.conv2d_int8 import tile_width

    target = "llvm -mcpu=cascadelake"
    rng = np.random.default_rng(9)
    x = relay.var("x", shape=(2, 12, 64), dtype="uint8")
    y = relay.var("y", shape=(2, 32, 64), dtype="uint8")
    mm = qnn.op.batch_matmul(x, y, relay.const(3), relay.const(131), relay.const(0.05), relay.const(0.02))
    mod = module(mm)
    inputs = {"x": rng.integers(0, 256, (2, 12, 64)).astype("uint8"), "y": rng.integers(0, 256, (2, 32, 64)).astype("uint8")}
    tasks = autotvm.task.extract_from_program(mod["main"], target=target, params={})
    assert [t.name for t in tasks] == ["batch_matmul_int8.x86"], [t.name for t in tasks]
    space = tasks[0].config_space
    assert space.get(space.default_index())["tile_m"].val == tile_width(12, 4) == 4
    if why_host_cannot_run(target):
        pytest.skip(f"{target}: {why_host_cannot_run(target)}")
    log = str(tmp_path / "bmm.log")
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=1, timeout=60),
                                    runner=autotvm.LocalRunner(number=2, repeat=1, timeout=60, cooldown_interval=0,
                                                               check_correctness=True))
    GridSearchTuner(tasks[0]).tune(n_trial=2, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    rows = list(record.load_from_file(log))
    assert len(rows) == 2 and all(r.error_no == 0 for _, r in rows), rows
    with autotvm.apply_history_best(log):
        lib = _build(mod, target)
    for got, want in zip(_run(lib, inputs), reference(mod, inputs)):
        np.testing.assert_array_equal(got, want)


def test_mixed_conv_reference_is_the_packed_convs():
    """nn.contrib_conv2d_int8_mixed's numpy reference (the debug executor's) equals the packed
    conv's on the same weights (3x3, stride 2, padding with the zero point)."""
    from kiln.relay.qnn.cpu_int8 import CONV2D_INT8, CONV2D_INT8_MIXED
    from kiln.topi.x86.conv2d_int8 import mixed_table

    rng = np.random.default_rng(0)
    w = np.clip(rng.normal(0, 40, (16, 16, 3, 3)), -127, 127).astype("int8")
    parts = int8_pack.plan_mixed_conv_weight(w, 8, 8)
    x = rng.integers(0, 256, (1, 2, 9, 9, 8)).astype("uint8")
    table = mixed_table(parts[2], x.shape, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1))
    bias = rng.integers(-1000, 1000, 16).astype("int32")
    q, s = np.full(16, 1 << 30, np.int64), np.full(16, 40, np.int64)
    common = dict(strides=(2, 2), padding=(1, 1, 1, 1), pad_value=3, rounding="UPWARD")
    got = CONV2D_INT8_MIXED.reference(CONV2D_INT8_MIXED.make_attrs(dict(common, kernel_size=(3, 3))), x, parts[0],
                                      parts[1], table, bias, q, s)
    want = CONV2D_INT8.reference(CONV2D_INT8.make_attrs(dict(common, tier="vnni")), x,
                                 int8_pack.pack_conv_weight(w, 8, 8), bias, q, s)
    np.testing.assert_array_equal(got, want)
