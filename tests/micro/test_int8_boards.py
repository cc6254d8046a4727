"""int8 models on the emulated boards through the AOT flow (issue 36 item 1): a small
keyword-spotting-shaped CNN quantized by onnxruntime (QDQ with int8 activations, and QOperator
with uint8 activations; per-channel int8 weights) imported as integer
relay (qnn, FakeQuantizationToInteger), built for target c with -keys=arm_cpu -mcpu=cortex-m4 /
m7 / m55, run as standalone firmware on mps2-an386 / mps2-an500 / mps3-an547 and compared with
onnxruntime's int8 run and with the host (llvm) build of the same integer graph."""

import os
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
oq = pytest.importorskip("onnxruntime.quantization")

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "relay"))
sys.path.insert(0, os.path.join(HERE, "..", "relay", "qnn"))
from onnx_models import GraphBuilder, run_ort  # noqa: E402
from qnn_run import anchor_ops  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import micro, relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.micro.toolchain import missing_arm_gcc, missing_qemu  # noqa: E402
from kiln.relay.backend import Executor, Runtime  # noqa: E402

SHAPE = (1, 1, 20, 10)


def _kws_cnn():
    """conv 3x3 + ReLU, depthwise 3x3 + ReLU, pointwise 1x1 with a residual Add + ReLU, max pool,
    global average pool, a 12-class Gemm."""
    g = GraphBuilder(11)
    x = g.op("Relu", [g.conv("data", 1, 8, 3, bias=True)])
    y = g.op("Relu", [g.conv(x, 8, 8, 3, group=8, bias=True)])
    x = g.op("Relu", [g.op("Add", [x, g.conv(y, 8, 8, 1)])])
    x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    out = g.op("Gemm", [x, g.weight("fc", (12, 8)), g.init("fc_b", np.linspace(-1, 1, 12).astype("float32"))],
               transB=1)
    return g.model({"data": SHAPE}, out)


class _Calibration(oq.CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(0)
        self.data = iter([{"data": rng.standard_normal(SHAPE).astype("float32")} for _ in range(8)])

    def get_next(self):
        return next(self.data, None)


_CACHE = {}


def _quantized(fmt, work):
    """(model, relay mod, params, host build, output scale) of the CNN quantized by onnxruntime:
    QDQ with int8 activations, or QOperator (QLinearConv, QGemm, ...) with uint8 activations."""
    if fmt in _CACHE:
        return _CACHE[fmt]
    onnx.save(_kws_cnn(), str(work / "f.onnx"))
    # reduce_range (7-bit weights): onnxruntime's x86 u8 x s8 kernels saturate otherwise (docs/quantization.md)
    oq.quantize_static(str(work / "f.onnx"), str(work / "q.onnx"), _Calibration(),
                       quant_format=getattr(oq.QuantFormat, fmt),
                       activation_type=oq.QuantType.QInt8 if fmt == "QDQ" else oq.QuantType.QUInt8,
                       weight_type=oq.QuantType.QInt8, per_channel=True, reduce_range=True)
    model = onnx.load(str(work / "q.onnx"))
    last = model.graph.node[-1]
    assert last.op_type == "DequantizeLinear"
    scale = next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name == last.input[1])
    mod, params = relay.frontend.from_onnx(model)
    host = relay.build(mod, target="llvm", params=params)
    _CACHE[fmt] = model, mod, params, host, float(scale)
    return _CACHE[fmt]


@pytest.mark.parametrize("fmt,template,cpu", [("QDQ", "qemu-mps2-an386", "cortex-m4"),
                                              ("QDQ", "qemu-mps2-an500", "cortex-m7"),
                                              ("QDQ", "qemu-mps3-an547", "cortex-m55"),
                                              ("QOperator", "qemu-mps2-an386", "cortex-m4")])
def test_quantized_onnx_model_on_the_board_matches_onnxruntime(fmt, template, cpu, tmp_path):
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    model, mod, params, host, out_scale = _quantized(fmt, tmp_path)
    lib = relay.build(mod, target=f"c -keys=arm_cpu -mcpu={cpu}", params=params,
                      runtime=Runtime("crt", {"system-lib": True}), executor=Executor("aot"))
    ops = anchor_ops(lib)
    acts = "int8" if fmt == "QDQ" else "uint8"
    assert len(ops) == 4 and all(ins == (acts, "int8") and out == "int32" for _, ins, out in ops), ops
    project = micro.generate_project(micro.get_microtvm_template_projects(template), lib, tmp_path / "fw")
    project.build()
    rng = np.random.default_rng(5)
    worst = 0.0
    with micro.Session(project.transport()) as session:
        aot = micro.create_local_aot_executor(session)
        for _ in range(3):
            x = rng.standard_normal(SHAPE).astype("float32")
            aot.get_input("data").copyfrom(x)
            assert aot.run() > 0
            got = aot.get_output(0).numpy()
            m = graph_executor.GraphModule(host["default"](tvm.cpu(0)))
            m.set_input(data=x)
            m.run()
            # The same integer graph on both: equal bits (the last dequantize is one float multiply).
            np.testing.assert_array_equal(got, m.get_output(0).numpy())
            # onnxruntime requantizes with a float32 scale rounding ties to even, kiln with an int64
            # fixed-point multiplier rounding ties upward: the outputs may differ by one step.
            steps = np.abs(got - run_ort(model, {"data": x})[0]) / out_scale
            worst = max(worst, float(steps.max()))
    assert worst <= 1 + 1e-3, worst


def _requantize_reference(x, reals, zo):
    """round-half-up(x * real) + zo with Python integers: (q, e) from math.frexp (kiln's own
    quantize_multiplier is not used), ``floor((x q + 2**(s-1)) / 2**s)``, s = 31 - e."""
    import math
    out = np.empty(x.shape, np.int64)
    for idx in np.ndindex(*x.shape):
        m, e = math.frexp(float(reals[idx[-1]]))
        q = int(m * 2 ** 31 + 0.5)
        if q == 2 ** 31:
            q, e = q // 2, e + 1
        s = 31 - e
        out[idx] = ((int(x[idx]) * q + (1 << (s - 1))) >> s) + zo
    return np.clip(out, -128, 127).astype("int8")


def test_per_channel_requantize_on_the_m4_is_a_shift_and_exact(tmp_path):
    """A per-channel requantize (NHWC, channels last) on the M4F board: the rounding divide by 2**s
    is an arithmetic shift, so the firmware calls no 64-bit division helper, and the outputs equal
    the Python-integer reference."""
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    import subprocess
    from kiln.relay import qnn
    rng = np.random.default_rng(3)
    x = rng.integers(-(1 << 18), 1 << 18, size=(1, 4, 5, 6)).astype("int32")
    x[0, 0, 0, :] = [-(1 << 31) + 7, (1 << 31) - 7, 0, -1, 1, -2]
    si = np.array([0.5, 0.013, 2.5e-4, 0.0071, 1.7e-3, 3e-5], "float32")
    body = qnn.op.requantize(relay.var("x", shape=x.shape, dtype="int32"), si, 0, np.float32(1.0), -3,
                             axis=3, out_dtype="int8")
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(body), body))
    lib = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m4",
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), lib,
                                     tmp_path / "fw", {"inputs": {"x": x}})
    project.build()
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", project.elf], capture_output=True, text=True,
                         check=True).stdout
    assert "__aeabi_ldivmod" not in dis
    got = next(iter(project.run()["outputs"].values()))
    np.testing.assert_array_equal(got, _requantize_reference(x, si.astype(np.float64), -3))


def _narrow_case():
    """A per-channel requantize whose multipliers are all below 2**-2 (shift >= 33): on a
    Cortex-M target NarrowRequantize computes it in 32-bit (one SMLAL, an int32 shift and clamp)."""
    from kiln.relay import qnn
    rng = np.random.default_rng(4)
    x = rng.integers(-(1 << 24), 1 << 24, size=(1, 3, 4, 6)).astype("int32")
    x[0, 0, 0, :] = [-(1 << 31), (1 << 31) - 1, 0, -1, 1, -(1 << 30)]
    x[0, 0, 1, :] = [(1 << 31) - 1, -(1 << 31), 12345, -12345, 7, -7]
    si = np.array([0.2, 0.013, 2.5e-4, 0.0071, 1.7e-3, 3e-10], "float32")
    body = qnn.op.requantize(relay.var("x", shape=x.shape, dtype="int32"), si, 0, np.float32(1.0), -3,
                             axis=3, out_dtype="int8")
    return x, si, tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(body), body))


def test_narrowed_requantize_equals_the_int64_one_on_the_host():
    """NarrowRequantize (kiln/relay/transform/narrow_requantize.py) runs for -mcpu=cortex-m*: the
    optimized graph has the int32 shift, and the C build (here by the host's cc) gives the
    Python-integer reference's integers, extremes of int32 included; without -mcpu it is left alone."""
    from kiln.relay.build_module import optimize
    from kiln.target import Target
    x, si, mod = _narrow_case()
    for target, narrowed in (("c -keys=arm_cpu -mcpu=cortex-m4", True), ("c", False)):
        with Target(target):
            text = str(optimize(mod, Target(target))[0]["main"])
        assert ("right_shift(%3, 32i64)" in text and "minimum(%8, 127) " in text) == narrowed, text
        m = graph_executor.GraphModule(relay.build(mod, target=target)["default"](tvm.cpu(0)))
        m.set_input(x=x)
        m.run()
        np.testing.assert_array_equal(m.get_output(0).numpy(), _requantize_reference(x, si.astype(np.float64), -3))


def test_narrowed_requantize_on_the_m4_is_one_smlal_and_exact(tmp_path):
    """The same requantize on the M4F board: no 64 x 64-bit multiply helper or three-multiply
    sequence (smlal/smull are there), and the Python-integer reference's integers."""
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    import subprocess
    x, si, mod = _narrow_case()
    lib = relay.build(mod, target="c -keys=arm_cpu -mcpu=cortex-m4",
                      executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), lib,
                                     tmp_path / "fw", {"inputs": {"x": x}})
    project.build()
    dis = subprocess.run(["arm-none-eabi-objdump", "-d", project.elf], capture_output=True, text=True,
                         check=True).stdout
    assert "__aeabi_lmul" not in dis and ("\tsmlal" in dis or "\tsmull" in dis)
    got = next(iter(project.run()["outputs"].values()))
    np.testing.assert_array_equal(got, _requantize_reference(x, si.astype(np.float64), -3))


def test_float32_requantize_clamps_in_int32_on_cortex_m(tmp_path):
    """onnxruntime's requantize (``clip(round(float32(x) * m) + z)``, the ONNX importer's FLOAT32
    rounding) on a Cortex-M target: the zero point and clamp in int32 (NarrowRequantize), the same
    integers as numpy's float32 arithmetic on the host's cc and on the M4F board (ties included:
    the rounding's add is not fused with the product); the clamp is one SSAT there."""
    from kiln.relay.build_module import optimize
    from kiln.target import Target
    rng = np.random.default_rng(7)
    x = rng.integers(-(1 << 20), 1 << 20, size=(1, 4, 3, 5)).astype("int32")
    x[0, 0, 0, :] = [-(1 << 31), (1 << 31) - 1, 0, 1 << 24, -(1 << 24) - 1]
    m = np.array([0.013, 2.5e-4, 0.49, 1.7e-3], "float32").reshape(1, 4, 1, 1)
    x[0, 1, 0, :4] = np.round(np.array([0.5, 1.5, 2.5, -0.5]) / 2.5e-4)  # exact ties in float32
    body = relay.cast(relay.clip(relay.add(relay.round(relay.multiply(relay.cast(relay.var("x", shape=x.shape,
                                                                                          dtype="int32"), "float32"),
                                                                       relay.const(m))),
                                           relay.const(np.float32(-5))), -128, 127), "int8")
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(body), body))
    want = np.clip(np.rint((x.astype(np.float32) * m).astype(np.float32)) - 5, -128, 127).astype(np.int8)
    target = "c -keys=arm_cpu -mcpu=cortex-m4"
    with Target(target):
        text = str(optimize(mod, Target(target))[0]["main"])
    assert "clip(" not in text and "minimum(" in text, text
    host = graph_executor.GraphModule(relay.build(mod, target=target)["default"](tvm.cpu(0)))
    host.set_input(x=x)
    host.run()
    np.testing.assert_array_equal(host.get_output(0).numpy(), want)
    why = missing_arm_gcc() or missing_qemu()
    if why:
        pytest.skip(why)
    lib = relay.build(mod, target=target, executor=Executor("aot", {"interface-api": "c", "unpacked-api": True}))
    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an386"), lib,
                                     tmp_path / "fw", {"inputs": {"x": x}})
    project.build()
    import subprocess
    asm = subprocess.run(["arm-none-eabi-objdump", "-d", project.elf], capture_output=True, text=True).stdout
    assert "\tssat" in asm  # the int32 clamp to int8 is one SSAT (kiln_ssat, kiln/codegen/c.py)
    # the rounding's integer from the magic sum's bits by QSUB (kiln_rne22_add): x's int32 extremes
    # above put the float sum out of its exact range on both sides (saturated alike by the clamp)
    assert "kiln_rne22_add(" in "\n".join(lib.sources.values()) and "\tqsub" in asm
    np.testing.assert_array_equal(next(iter(project.run()["outputs"].values())), want)
