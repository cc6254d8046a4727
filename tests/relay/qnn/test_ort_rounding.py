"""The ONNX importer's rounding (``FLOAT32``, relay/qnn/fixed_point.py) is onnxruntime's arithmetic:
single-op QDQ models that onnxruntime fuses into QLinearConv / QLinearAdd / QLinearGlobalAveragePool
give onnxruntime's integers, and whole models quantized by onnxruntime's quantize_static stay
within one output step of onnxruntime's int8 run.

The reference is onnxruntime itself (its x86 kernels: a float32 product rounded half to even, and
QLinearAdd's two fused multiply-adds). Scales are chosen so that exact ties occur (where kiln's
fixed-point UPWARD rounding differs on every tie) and at random (where a float32 product and the
exact one round apart now and then). Weights are 7-bit (``reduce_range``): onnxruntime's AVX2
kernels sum u8 x s8 pairs in int16 with saturation, so full-range weights are no reference there.
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from qnn_run import anchor_ops  # noqa: E402

F32 = np.float32


def _model(nodes, inits, inputs, out="y", out_type=TensorProto.UINT8):
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, out_type, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _ort(model, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _kiln(model, feeds, config=None, reference=False):
    shapes = {k: v.shape for k, v in feeds.items()}
    mod, params = relay.frontend.from_onnx(model, shapes)
    if reference:  # the qnn ops' numpy references, after the same passes as relay.build
        from kiln.relay.transform import FakeQuantizationToInteger
        mod = FakeQuantizationToInteger()(relay.transform.InferType()(mod))
        out = relay.create_executor("debug", mod).evaluate()(**feeds, **params)
        return np.asarray(out.numpy() if hasattr(out, "numpy") else out)
    with tvm.transform.PassContext(opt_level=3, config=config or {}):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(**feeds)
    m.run()
    return m.get_output(0).numpy(), lib


def _inits(**arrays):
    return [numpy_helper.from_array(np.asarray(v), k) for k, v in arrays.items()]


def _add_model(sa, za, sb, zb, sc, zc):
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["af"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"]),
             helper.make_node("Add", ["af", "bf"], ["cf"]),
             helper.make_node("QuantizeLinear", ["cf", "sc", "zc"], ["y"])]
    ins = [helper.make_tensor_value_info(n, TensorProto.UINT8, [256, 256]) for n in ("a", "b")]
    return _model(nodes, _inits(sa=F32(sa), za=np.uint8(za), sb=F32(sb), zb=np.uint8(zb), sc=F32(sc),
                                zc=np.uint8(zc)), ins)


def test_qdq_add_is_onnxruntimes_qlinearadd():
    """Every pair of uint8 inputs: kiln's compiled qnn.add (FLOAT32) and its numpy reference give
    onnxruntime's QLinearAdd bytes (kiln's fixed-point UPWARD add rounds each input on its own:
    about a third of these differ by one)."""
    rng = np.random.default_rng(0)
    a = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 256, 1)
    feeds = {"a": a, "b": np.ascontiguousarray(a.T)}
    cases = [(0.5, 3, 0.25, 100, 1.0, 7)]  # exact ties
    for _ in range(3):
        sa, sb, sc = rng.uniform(0.01, 0.2), rng.uniform(0.01, 0.2), rng.uniform(0.02, 0.3)
        cases.append((sa, int(rng.integers(0, 256)), sb, int(rng.integers(0, 256)), sc, int(rng.integers(0, 256))))
    for case in cases:
        model = _add_model(*case)
        want = _ort(model, feeds)
        got, _ = _kiln(model, feeds)
        np.testing.assert_array_equal(got, want, err_msg=f"scales/zero points {case}")
        np.testing.assert_array_equal(_kiln(model, feeds, reference=True), want)


def _conv_model(rng, cin, cout, sx, zx, sw, sy, zy, k=1, group=1, wmax=63):
    w = rng.integers(-wmax, wmax + 1, (cout, cin // group, k, k)).astype(np.int8)
    bias = rng.integers(-4000, 4000, cout).astype(np.int32)
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], pads=[k // 2] * 4, group=group),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"])]
    inits = _inits(sx=F32(sx), zx=np.uint8(zx), w=w, sw=sw.astype(F32), zw=np.zeros(cout, np.int8), b=bias,
                   sb=(F32(sx) * sw).astype(F32), zb=np.zeros(cout, np.int32), sy=F32(sy), zy=np.uint8(zy))
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.UINT8, None)])


@pytest.mark.parametrize("kind", ["conv", "depthwise"])
def test_qdq_conv_is_onnxruntimes_qlinearconv(kind):
    """The requantize after a conv: float32(acc + bias) * (x_scale * w_scale / y_scale) in float32,
    rounded half to even, on the int8 kernels and on the canonical path, as onnxruntime."""
    rng = np.random.default_rng(1)
    cin, cout, group, k = (32, 32, 1, 1) if kind == "conv" else (32, 32, 32, 3)
    ties = _conv_model(rng, cin, cout, 0.5, 128, np.full(cout, 0.25, F32), 1.0, 128, k, group, wmax=3)
    rand = _conv_model(rng, cin, cout, 0.02, 117, rng.uniform(0.002, 0.02, cout), 0.15, 121, k, group)
    x = {"x": rng.integers(0, 256, (1, cin, 20, 20)).astype(np.uint8)}
    for model in (ties, rand):
        want = _ort(model, x)
        got, lib = _kiln(model, x)
        assert any(op.startswith("nn.contrib_") for op, _, _ in anchor_ops(lib)), anchor_ops(lib)
        np.testing.assert_array_equal(got, want)
        plain, _ = _kiln(model, x, {"relay.qnn.int8_kernels": False})
        np.testing.assert_array_equal(plain, want)


def test_qdq_global_average_pool_is_onnxruntimes():
    """QLinearGlobalAveragePool: the int32 sum times x_scale / (y_scale * H * W) in float32."""
    rng = np.random.default_rng(2)
    for sx, zx, sy, zy in [(0.5, 3, 1.0, 9), (0.031, 117, 0.017, 121), (0.07, 0, 0.05, 0)]:
        nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
                 helper.make_node("GlobalAveragePool", ["xf"], ["pf"]),
                 helper.make_node("QuantizeLinear", ["pf", "sy", "zy"], ["y"])]
        model = _model(nodes, _inits(sx=F32(sx), zx=np.uint8(zx), sy=F32(sy), zy=np.uint8(zy)),
                       [helper.make_tensor_value_info("x", TensorProto.UINT8, None)])
        x = {"x": rng.integers(0, 256, (1, 512, 7, 7)).astype(np.uint8)}
        got, _ = _kiln(model, x)
        np.testing.assert_array_equal(got, _ort(model, x))


# -- whole models from onnxruntime's quantize_static ----------------------------------------------

def _mobilenet_block():
    """conv3x3/2 + Clip(0, 6), inverted residual (1x1 expand + Clip, depthwise 3x3 + Clip, 1x1
    project) with its residual Add, global pool, Gemm: float ONNX, random weights."""
    rng = np.random.default_rng(3)
    inits, nodes = [], []

    def conv(name, x, cin, cout, k, s=1, group=1, clip=True):
        w = (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2 / (cin // group * k * k))).astype(F32)
        inits.extend(_inits(**{name + "_w": w, name + "_b": (rng.standard_normal(cout) * 0.1).astype(F32)}))
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], pads=[k // 2] * 4,
                                      strides=[s, s], group=group))
        if not clip:
            return name
        nodes.append(helper.make_node("Clip", [name, "lo", "hi"], [name + "_c"]))
        return name + "_c"

    inits.extend(_inits(lo=F32(0), hi=F32(6)))
    y = conv("stem", "x", 3, 16, 3, 2)
    e = conv("exp", y, 16, 64, 1)
    d = conv("dw", e, 64, 64, 3, group=64)
    p = conv("proj", d, 64, 16, 1, clip=False)
    nodes.append(helper.make_node("Add", [p, y], ["res"]))
    z = conv("head", "res", 16, 64, 1)
    nodes += [helper.make_node("GlobalAveragePool", [z], ["gap"]), helper.make_node("Flatten", ["gap"], ["fl"])]
    inits.extend(_inits(fc_w=(rng.standard_normal((10, 64)) * 0.2).astype(F32), fc_b=np.zeros(10, F32)))
    nodes.append(helper.make_node("Gemm", ["fl", "fc_w", "fc_b"], ["out"], transB=1))
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                  out="out", out_type=TensorProto.FLOAT)


def _quantize_static(model, tmp_path, shape):
    from onnxruntime import quantization as oq

    rng = np.random.default_rng(4)

    class Reader(oq.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal(shape).astype(F32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(model, src)
    oq.quantize_static(src, dst, Reader(), quant_format=oq.QuantFormat.QDQ, per_channel=True, reduce_range=True,
                       activation_type=oq.QuantType.QUInt8, weight_type=oq.QuantType.QInt8)
    q = onnx.load(dst)
    out_dq = next(n for n in q.graph.node if n.output[0] == q.graph.output[0].name)
    step = float(next(numpy_helper.to_array(i) for i in q.graph.initializer if i.name == out_dq.input[1]))
    return q, step


def test_quantize_static_model_within_one_step_of_onnxruntime(tmp_path):
    """A MobileNetV2-style QDQ model (Clip(0, 6) folded away by the quantizer, a residual Add, a
    depthwise conv, global pooling, Gemm): kiln's output is within one output step of
    onnxruntime's on every value (measured: equal), on the int8 kernels."""
    q, step = _quantize_static(_mobilenet_block(), tmp_path, (1, 3, 32, 32))
    rng = np.random.default_rng(6)
    for trial in range(3):
        x = {"x": rng.standard_normal((1, 3, 32, 32)).astype(F32)}
        got, lib = _kiln(q, x)
        assert {"nn.contrib_conv2d_int8", "nn.contrib_depthwise_conv2d_int8"} <= {op for op, _, _ in anchor_ops(lib)}
        diff = np.abs(got - _ort(q, x)) / step
        assert diff.max() <= 1.001, diff.max()


def _conv_bn_net():
    """Conv + BatchNormalization + Relu twice, global pool, Gemm: float ONNX with its batch norms
    kept (quantized as they are, not folded into the convs first)."""
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def conv_bn(name, x, cin, cout, k):
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k))).astype(F32)
        inits.extend(_inits(**{name + "_w": w, name + "_g": rng.uniform(0.5, 1.5, cout).astype(F32),
                               name + "_b": (rng.standard_normal(cout) * 0.1).astype(F32),
                               name + "_m": (rng.standard_normal(cout) * 0.1).astype(F32),
                               name + "_v": rng.uniform(0.5, 2.0, cout).astype(F32)}))
        nodes.append(helper.make_node("Conv", [x, name + "_w"], [name], pads=[k // 2] * 4))
        nodes.append(helper.make_node("BatchNormalization", [name] + [name + s for s in ("_g", "_b", "_m", "_v")],
                                      [name + "_bn"]))
        nodes.append(helper.make_node("Relu", [name + "_bn"], [name + "_r"]))
        return name + "_r"

    y = conv_bn("c2", conv_bn("c1", "x", 3, 16, 3), 16, 32, 1)
    nodes += [helper.make_node("GlobalAveragePool", [y], ["gap"]), helper.make_node("Flatten", ["gap"], ["fl"])]
    inits.extend(_inits(fc_w=(rng.standard_normal((10, 32)) * 0.2).astype(F32), fc_b=np.zeros(10, F32)))
    nodes.append(helper.make_node("Gemm", ["fl", "fc_w", "fc_b"], ["out"], transB=1))
    return _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                  out="out", out_type=TensorProto.FLOAT)


def test_unfolded_batch_norm_stays_in_the_int8_kernels(tmp_path):
    """A QDQ model whose batch norms were quantized as they are (DQ -> BatchNormalization -> Q
    after each conv: what onnxruntime's quant_pre_process leaves on some versions) runs its batch
    norms inside the int8 convs' kernels, in their blocked layout (relay/qnn/cpu_int8.py): no
    layout_transform pair around each, and the bytes of the plain NCHW path, within one output
    step of onnxruntime."""
    from kiln.relay.qnn.cpu_int8 import x86_plan

    if x86_plan(tvm.target.Target("llvm")) is None:
        pytest.skip("the host is not an x86 CPU with AVX2: no CPU int8 kernels")
    q, step = _quantize_static(_conv_bn_net(), tmp_path, (1, 3, 16, 16))
    assert sum(n.op_type == "BatchNormalization" for n in q.graph.node) == 2
    x = {"x": np.random.default_rng(8).standard_normal((1, 3, 16, 16)).astype(F32)}
    got, lib = _kiln(q, x)
    kernels = lib.ir_mod["main"].astext().split("fn (")[1:]
    convs = [k for k in kernels if "nn.contrib_conv2d_int8" in k]
    # the batch norm's per-channel scale is a parameter of the conv's kernel (multiply by %p...)
    assert len(convs) == 2 and all(re.search(r"multiply\(%\d+, %p", k) for k in convs), convs
    # layout_transform at the input and before the global pool only, none around the batch norms
    assert sum("layout_transform" in k for k in kernels) <= 2, kernels
    plain, _ = _kiln(q, x, {"relay.qnn.int8_kernels": False})
    np.testing.assert_array_equal(got, plain)
    assert np.abs(got - _ort(q, x)).max() / step <= 1.001


def test_qdq_conv_batches_on_the_int8_kernels():
    """Three images and 48 output channels (on AMX hosts: three tasks' images, one 16-channel piece
    per block, an odd run count) give onnxruntime's QLinearConv bytes and the plain path's."""
    rng = np.random.default_rng(3)
    model = _conv_model(rng, 64, 48, 0.02, 117, rng.uniform(0.002, 0.02, 48), 0.15, 121, 1)
    x = {"x": rng.integers(0, 256, (3, 64, 7, 7)).astype(np.uint8)}
    got, lib = _kiln(model, x)
    assert any(op.startswith("nn.contrib_") for op, _, _ in anchor_ops(lib)), anchor_ops(lib)
    np.testing.assert_array_equal(got, _ort(model, x))
    np.testing.assert_array_equal(got, _kiln(model, x, {"relay.qnn.int8_kernels": False})[0])
