"""The int8 epilogue's arithmetic on x86: ``int32(round(x))`` as one ``cvtps2dq`` (the LLVM
backend's ``rounded_to_int32``), checked in the assembly of several CPU models and run against
numpy's half-to-even ``rint``; AArch64 keeps ``roundeven`` + ``fptosi``."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir
from kiln.target.cpu_facts import why_host_cannot_run


def _round_kernel(src: str, lanes: int):
    n = 64
    a = te.placeholder((n,), src, name="A")
    b = te.compute((n,), lambda i: tir.round(a[i]).astype("int32"), name="B")
    s = te.create_schedule(b.op)
    _, xi = s[b].split(b.op.axis[0], factor=lanes)
    s[b].vectorize(xi)
    return s, [a, b]


@pytest.mark.parametrize("mcpu,lanes,cvt", [("haswell", 8, r"vcvtps2dq\s.*%ymm"), ("znver3", 8, r"vcvtps2dq\s.*%ymm"),
                                            ("skylake-avx512", 16, r"vcvtps2dq\s.*%zmm"),
                                            ("sapphirerapids", 16, r"vcvtps2dq\s.*%zmm")])
def test_round_to_int32_is_one_conversion_on_x86(mcpu, lanes, cvt):
    target = f"llvm -mcpu={mcpu}"
    f = tvm.build(*_round_kernel("float32", lanes), target=target)
    asm = f.get_source("asm")
    assert re.search(cvt, asm), f"-mcpu={mcpu}: no {cvt}"
    assert not re.search(r"\broundps|\broundss|cvttps2dq|cvttss2si", asm), f"-mcpu={mcpu}: round + truncation left"
    if why_host_cannot_run(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (checked its assembly only)")
    # ties both ways, values a step either side of a tie, the int32 range's ends (exact in float32)
    ties = np.arange(-8, 8, dtype=np.float32) + np.float32(0.5)
    near = np.concatenate([np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
    ends = np.array([-2.0 ** 31, 2.0 ** 31 - 128, -1e9 - 0.5, 123456.5], np.float32)
    x = np.concatenate([ties, near, ends]).astype(np.float32)
    x = np.resize(x, 64)
    y = tvm.nd.empty((64,), "int32")
    f(tvm.nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), np.rint(x).astype(np.int32))


def test_round_to_int32_from_float64_on_x86():
    target = "llvm -mcpu=haswell"
    f = tvm.build(*_round_kernel("float64", 4), target=target)
    asm = f.get_source("asm")
    assert re.search(r"vcvtpd2dq", asm) and "vroundpd" not in asm
    if why_host_cannot_run(target):
        pytest.skip(why_host_cannot_run(target))
    x = np.resize(np.arange(-20, 20, dtype=np.float64) / 4, 64)
    y = tvm.nd.empty((64,), "int32")
    f(tvm.nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), np.rint(x).astype(np.int32))


def test_aarch64_keeps_round_to_nearest_even_then_truncation():
    """No lrint there (it would round in the current mode: frintx); frintn + fcvtzs as before."""
    f = tvm.build(*_round_kernel("float32", 4), target="llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    asm = f.get_source("asm")
    assert re.search(r"frintn\s", asm) or re.search(r"fcvtns\s", asm), asm[:2000]
    assert "frintx" not in asm


# -- a conv's requantize read by the fused residual add as a float ----------------------------------

def _conv_add_model(rng, cin, cout, sx, zx, sw, sy, zy, sr, zr, sc, zc, wmax=63):
    """QDQ: u8 x -> 1x1 Conv (7-bit weights, int32 bias) -> Q(sy, zy) -> DQ -> Add with
    DQ(r) -> Q(sc, zc): onnxruntime runs it as QLinearConv + QLinearAdd."""
    from onnx import TensorProto, helper, numpy_helper

    f32 = np.float32
    w = rng.integers(-wmax, wmax + 1, (cout, cin, 1, 1)).astype(np.int8)
    arrays = dict(sx=f32(sx), zx=np.uint8(zx), w=w, sw=sw.astype(f32), zw=np.zeros(cout, np.int8),
                  b=rng.integers(-3000, 3000, cout).astype(np.int32), sb=(f32(sx) * sw).astype(f32),
                  zb=np.zeros(cout, np.int32), sy=f32(sy), zy=np.uint8(zy), sr=f32(sr), zr=np.uint8(zr),
                  sc=f32(sc), zc=np.uint8(zc))
    dq = helper.make_node
    nodes = [dq("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             dq("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=0),
             dq("DequantizeLinear", ["b", "sb", "zb"], ["bf"], axis=0), dq("Conv", ["xf", "wf", "bf"], ["cf"])]
    nodes += [dq("QuantizeLinear", ["cf", "sy", "zy"], ["c"]),
              dq("DequantizeLinear", ["c", "sy", "zy"], ["cd"]), dq("DequantizeLinear", ["r", "sr", "zr"], ["rd"]),
              dq("Add", ["cd", "rd"], ["s"]), dq("QuantizeLinear", ["s", "sc", "zc"], ["y"])]
    ins = [helper.make_tensor_value_info(n, TensorProto.UINT8, None) for n in ("x", "r")]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in arrays.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _cases(rng, cout):
    # exact ties in both roundings: acc * 1/8 and (u + v) / 2; random scales; a scale that
    # saturates most requantized values at both ends
    ties = (0.5, 128, np.full(cout, 0.25, np.float32), 1.0, 128, 1.0, 100, 2.0, 7)
    rand = (0.02, 117, rng.uniform(0.002, 0.02, cout), 0.15, 121, 0.11, 90, 0.2, 131)
    sat = (0.05, 120, rng.uniform(0.01, 0.03, cout), 0.01, 60, 0.03, 200, 0.05, 100)
    return [ties, rand, sat]


@pytest.mark.parametrize("mcpu", ["haswell", "skylake-avx512", "host"])
def test_conv_with_fused_residual_add_gives_onnxruntimes_bytes(mcpu):
    """The fused add reads the conv's requantized value as an exact float (requantized_float:
    no narrowing and widening back); the bytes are onnxruntime's QLinearConv + QLinearAdd for
    AVX2, AVX-512BW and the host's code (and, on the host, the canonical path's for the ties)."""
    ort = pytest.importorskip("onnxruntime")
    from kiln import relay
    from kiln.contrib import graph_executor

    target = "llvm" if mcpu == "host" else f"llvm -mcpu={mcpu}"
    rng = np.random.default_rng(5)
    cin, cout, hw = 32, 32, 6
    feeds = {"x": rng.integers(0, 256, (1, cin, hw, hw)).astype(np.uint8),
             "r": rng.integers(0, 256, (1, cout, hw, hw)).astype(np.uint8)}
    for k, case in enumerate(_cases(rng, cout)):
        configs = [{}, {"relay.qnn.int8_kernels": False}] if mcpu == "host" and k == 0 else [{}]
        model = _conv_add_model(rng, cin, cout, *case)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        want = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        mod, params = relay.frontend.from_onnx(model, {k: v.shape for k, v in feeds.items()})
        for config in configs:
            with tvm.transform.PassContext(opt_level=3, config=config):
                lib = relay.build(mod, target=target, params=params)
            names = re.findall(r"^(tvmgen_\w+):", lib.get_lib().get_source("asm"), re.M)
            fused = any("conv2d_int8" in n and "qlinear_add" in n for n in names)
            assert fused == (not config), names  # int8 kernels: one kernel, the add in its epilogue
            if why_host_cannot_run(target):
                pytest.skip(f"{target}: {why_host_cannot_run(target)} (compiled only)")
            m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
            m.set_input(**feeds)
            m.run()
            np.testing.assert_array_equal(m.get_output(0).numpy(), want, err_msg=f"{case} {config}")


def test_float_operand_reads_the_requantize_inputs():
    """float_operand of a FLOAT32 requantize's output is an expression of its inputs (the
    accumulators, bias, multipliers), not a load of the narrowed tensor; of any other tensor a
    load converted to float32."""
    from kiln.ir.functor import post_order_visit
    from kiln.topi.x86.conv2d_int8 import float_operand, requantize_epilogue

    acc = te.placeholder((1, 2, 3, 3, 8), "int32", name="acc")
    bias = te.placeholder((16,), "int32", name="bias")
    mult = te.placeholder((16,), "float32", name="mult")
    shift = te.placeholder((16,), "int64", name="shift")
    out = requantize_epilogue(acc, bias, mult, shift, 7, 0, 255, "uint8", "FLOAT32")
    idx = [tir.const(0, "int32"), tir.const(1, "int32"), tir.const(2, "int32"), tir.const(0, "int32"),
           tir.const(5, "int32")]
    read = set()
    post_order_visit(float_operand(out, idx), lambda n: read.add(getattr(getattr(n, "producer", None), "name", None)))
    assert {"acc", "bias", "mult"} <= read and out.name not in read, read
    other = te.placeholder((4,), "uint8", name="u")
    assert float_operand(other, [tir.const(1, "int32")]).dtype == "float32"
    # other roundings have no float form: the consumer converts the bytes
    up = requantize_epilogue(acc, bias, te.placeholder((16,), "int64", name="q"), shift, 7, 0, 255, "uint8", "UPWARD")
    assert "float_value" not in up.op.attrs
    # an int32 output's bounds are beyond float32's integers: no float form either
    wide = requantize_epilogue(acc, bias, mult, shift, 5, -2 ** 31, 2 ** 31 - 1, "int32", "FLOAT32")
    assert "float_value" not in wide.op.attrs
    assert "float_value" in requantize_epilogue(acc, bias, mult, shift, -3, -2 ** 15, 2 ** 15 - 1, "int16",
                                                "FLOAT32").op.attrs


@pytest.mark.parametrize("mcpu", ["haswell", "host"])
def test_requantize_with_float_clamp_is_onnxruntimes_and_one_conversion(mcpu):
    """A multiplier so large that ``float32(acc + bias) * m`` may leave int32 (float_clamp): the
    clamp comes before the rounding, so the conversion is still one ``cvtps2dq`` (no
    ``vroundps``), and the bytes are onnxruntime's QLinearConv (most saturate at 0 or 255)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from kiln import relay
    from kiln.contrib import graph_executor

    target = "llvm" if mcpu == "host" else f"llvm -mcpu={mcpu}"
    rng = np.random.default_rng(9)
    cin, cout = 32, 32
    f32 = np.float32
    sw = rng.uniform(0.01, 0.03, cout).astype(f32)
    arrays = dict(sx=f32(0.05), zx=np.uint8(120), w=rng.integers(-63, 64, (cout, cin, 1, 1)).astype(np.int8), sw=sw,
                  zw=np.zeros(cout, np.int8),
                  b=(rng.integers(-300, 300, cout) * (np.arange(cout) % 2)).astype(np.int32),
                  sb=(f32(0.05) * sw).astype(f32), zb=np.zeros(cout, np.int32), sy=f32(2e-7), zy=np.uint8(131))
    n = helper.make_node
    nodes = [n("DequantizeLinear", ["x", "sx", "zx"], ["xf"]), n("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=0),
             n("DequantizeLinear", ["b", "sb", "zb"], ["bf"], axis=0), n("Conv", ["xf", "wf", "bf"], ["cf"]),
             n("QuantizeLinear", ["cf", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, None)],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in arrays.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    # m = 0.05 * sw / 2e-7 >= 2500: only a sum of 0 (every input at the zero point, no bias: even
    # channels) stays in range (the zero point 131), the rest saturate
    x = np.where(rng.random((1, 1, 6, 6)) < 0.5, 120, rng.integers(0, 256, (1, cin, 6, 6))).astype(np.uint8)
    mod, params = relay.frontend.from_onnx(model, {"x": x.shape})
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    asm = lib.get_lib().get_source("asm")
    bodies = re.split(r"^(tvmgen_\w[\w.]*):", asm, flags=re.M)  # [before, name, body, name, body, ...]
    kernel = "".join(b for n, b in zip(bodies[1::2], bodies[2::2]) if "conv2d_int8" in n)
    assert "cvtps2dq" in kernel and "roundps" not in kernel and "cvttps2dq" not in kernel
    if why_host_cannot_run(target):
        pytest.skip(f"{target}: {why_host_cannot_run(target)} (compiled only)")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(x=x)
    m.run()
    got = m.get_output(0).numpy()
    assert 0.1 < np.mean(got == 131) < 0.5 and np.mean(got == 0) > 0.1 and np.mean(got == 255) > 0.1
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mcpu,lanes", [("x86-64", 1), ("x86-64", 4), ("x86-64", 6), ("x86-64", 8), ("haswell", 8)])
def test_round_to_int32_of_an_unaligned_vector_load(mcpu, lanes):
    """A vector read one element past a 16-byte boundary (a[i + 1]): without AVX, LLVM folds the
    load of an ``llvm.lrint`` into legacy-SSE ``cvtps2dq mem``, which faults on an address that is
    not 16-byte aligned (also where its loop vectorizer widens a scalar loop: lanes 1), so there
    kiln keeps ``roundeven`` + truncation; AVX's VEX forms take any address."""
    target = f"llvm -mcpu={mcpu}"
    n = 48
    a = te.placeholder((n + 1,), "float32", name="A")
    b = te.compute((n,), lambda i: tir.round(a[i + 1]).astype("int32"), name="B")
    s = te.create_schedule(b.op)
    if lanes > 1:
        _, xi = s[b].split(b.op.axis[0], factor=lanes)
        s[b].vectorize(xi)
    f = tvm.build(s, [a, b], target=target)
    asm = f.get_source("asm")
    assert not re.search(r"^\s*cvtp[sd]2dq\s+[^%\s]*\(", asm, re.M), f"-mcpu={mcpu}: SSE conversion of a memory operand"
    if why_host_cannot_run(target):
        pytest.skip(f"-mcpu={mcpu}: {why_host_cannot_run(target)} (checked its assembly only)")
    x = (np.arange(n + 1, dtype=np.float32) - 20) / 2  # ties both ways
    y = tvm.nd.empty((n,), "int32")
    f(tvm.nd.array(x), y)
    np.testing.assert_array_equal(y.numpy(), np.rint(x[1:]).astype(np.int32))
