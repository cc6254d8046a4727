"""The int8 path on graph shapes users bring (issue 31, outsider check): small hand-built QDQ ONNX
models with the patterns of public architectures (a U-Net skip concat, squeeze-excite's
channel-wise multiply, a channel shuffle, grouped convs, residual adds) built for x86 without
VNNI (haswell: vpmaddubsw/mixed units, the channel reordering relay.qnn.int8_permute, Winograd),
AVX-512BW without VNNI (skylake-avx512) and the host, compared with onnxruntime's int8 run:
0 output steps. Full-range int8 weights make the reordering and the mixed units take part;
every activation a conv reads is kept below 128 (its scale from the float values of the very
inputs used), so onnxruntime's u8 x s8 sums are exact on AVX2 hosts too (vpmaddubsw pair sums
below 2**15). The full-size sweep over torchvision's models is ``heavy``."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.target.cpu_facts import why_host_cannot_run  # noqa: E402

TARGETS = ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512", "llvm"]


def _conv_np(x, w, pad, stride=1, group=1):
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    cin = x.shape[1] // group
    outs = [np.einsum("nchwij,ocij->nohw", win[:, g * cin:(g + 1) * cin], w[g * (w.shape[0] // group):
                                                                               (g + 1) * (w.shape[0] // group)])
            for g in range(group)]
    return np.concatenate(outs, axis=1)


class QDQ:
    """A QDQ model written node by node, each activation quantized to u8 with a scale that maps the
    largest float value of the test inputs (``self.inputs``, run alongside in float64) to 110."""

    def __init__(self, shape, seed=0, n_inputs=3):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0
        x = self.rng.uniform(0, 1, (n_inputs,) + tuple(shape[1:])).astype("float32")
        self.shape = tuple(shape)
        self.inputs = [x[i:i + 1] for i in range(n_inputs)]
        self.val = {"x": np.concatenate(self.inputs).astype("float64")}
        self.scale = {}
        self.top = self.q("x")

    def name(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def init(self, arr, p="c"):
        nm = self.name(p)
        self.inits.append(numpy_helper.from_array(arr, nm))
        return nm

    def q(self, t, params=None, zp=None):
        """Q -> DQ of float tensor ``t`` (u8, zero point 0 for non-negative tensors, else 64: values
        below 128), or with ``params`` = (scale, zero point), or that scale and zero point ``zp``."""
        v = self.val[t]
        neg = v.min() < 0
        s = np.float32(max(abs(v.max()), abs(v.min()), 1e-6) / (55 if neg else 110))
        zp = 64 if neg else 0
        if zp is not None:
            zp_ = zp
        if params is not None:
            s, zp = np.float32(params[0]), params[1]
        elif zp is not None:
            zp = zp_
        s_n, zp_n = self.init(np.array(s, "float32")), self.init(np.array(zp, "uint8"))
        qn, dqn = self.name("q"), self.name("dq")
        self.nodes += [helper.make_node("QuantizeLinear", [t, s_n, zp_n], [qn]),
                       helper.make_node("DequantizeLinear", [qn, s_n, zp_n], [dqn])]
        self.val[dqn] = (np.clip(np.round(v / s) + zp, 0, 255) - zp) * s
        self.scale[dqn] = float(s)
        return dqn

    def conv(self, x, cout, k=1, stride=1, group=1, relu=True, wstd=40.0, zp=None):
        """DQ(int8 weights, per-channel scales) -> Conv (int32 bias) -> [Relu] -> Q/DQ."""
        cin = self.val[x].shape[1]
        w = np.clip(np.round(self.rng.normal(0, wstd, (cout, cin // group, k, k))), -127, 127).astype("int8")
        fan = cin // group * k * k
        ws = (self.rng.uniform(0.5, 1.5, cout) / (wstd * np.sqrt(fan))).astype("float32")
        bs = (self.scale[x] * ws).astype("float32")
        b = self.rng.integers(-2000, 2000, cout).astype("int32")
        wq = self.name("wdq")
        bq = self.name("bdq")
        self.nodes += [
            helper.make_node("DequantizeLinear", [self.init(w), self.init(ws), self.init(np.zeros(cout, "int8"))],
                             [wq], axis=0),
            helper.make_node("DequantizeLinear", [self.init(b), self.init(bs), self.init(np.zeros(cout, "int32"))],
                             [bq], axis=0)]
        y = self.name("conv")
        self.nodes.append(helper.make_node("Conv", [x, wq, bq], [y], pads=[k // 2] * 4, strides=[stride] * 2,
                                           group=group, kernel_shape=[k, k]))
        wf = w.astype("float64") * ws.astype("float64").reshape(-1, 1, 1, 1)
        self.val[y] = _conv_np(self.val[x], wf, k // 2, stride, group) + (b * bs.astype("float64")).reshape(1, -1, 1, 1)
        if relu:
            y = self.op("Relu", [y])
        return self.q(y, zp=zp)

    def op(self, op_type, inputs, fn=None, quantize=False, params=None, **attrs):
        y = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [y], **attrs))
        vals = [self.val.get(i) for i in inputs]
        if fn is None:
            fn = {"Relu": lambda a: np.maximum(a, 0), "Add": np.add, "Mul": np.multiply,
                  "Concat": lambda *a: np.concatenate(a, axis=attrs.get("axis", 1)),
                  "GlobalAveragePool": lambda a: a.mean(axis=(2, 3), keepdims=True),
                  "HardSigmoid": lambda a: np.clip(a * attrs.get("alpha", 0.2) + attrs.get("beta", 0.5), 0, 1),
                  }[op_type]
        self.val[y] = fn(*vals)
        return self.q(y, params) if quantize else y

    def model(self, out):
        graph = helper.make_graph(self.nodes, "outsider",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1,) + self.shape[1:])],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, self.val[out].shape[1:] and (1,) + self.val[out].shape[1:])], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def _ort(model, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _build(model, target, config=None):
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3, config=config):
        return relay.build(mod, target=target, params=params)


def _run(lib, x):
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(x=x)
    m.run()
    return m.get_output(0).numpy()


def assert_ort_steps_zero(b: QDQ, out: str, targets=TARGETS, configs=(None,)):
    """kiln's output equals onnxruntime's for every test input, target and PassContext config."""
    model = b.model(out)
    step = b.scale.get(out, 1.0)
    wants = [_ort(model, x) for x in b.inputs]
    ran = 0
    for target in targets:
        for config in configs:
            lib = _build(model, target, config)
            if why_host_cannot_run(target):
                continue
            ran += 1
            for x, want in zip(b.inputs, wants):
                got = _run(lib, x)
                steps = np.abs(got.astype("float64") - want).max() / step
                assert steps == 0, f"{target} {config}: {steps:.1f} output steps off onnxruntime"
    if not ran:
        pytest.skip("this host runs none of " + ", ".join(targets))


# -- patterns -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pool", [False, True])
def test_skip_concat_of_a_reordered_conv_output(pool):
    """U-Net / DenseNet shape: a conv output read by a conv (groups=1, so its channels may be
    reordered for the reader's vpmaddubsw units) AND by a Concat (a tuple field), directly or
    through a max pool (channel-blind): the concat must see the channels in their true order
    (found by this file: 57 output steps off on haswell before cpu_int8._Uses saw tuple fields)."""
    b = QDQ((1, 8, 6, 6), seed=1)
    a = b.conv(b.top, 32, k=3, relu=False)  # a relu'd conv is no reorderable producer (maximum in between)
    if pool:
        a = b.op("MaxPool", [a], fn=lambda v: v.reshape(v.shape[0], 32, 3, 2, 3, 2).max(axis=(3, 5)),
                 quantize=True, kernel_shape=[2, 2], strides=[2, 2])
    c = b.conv(a, 32)
    cat = b.op("Concat", [a, c], quantize=True, axis=1)
    out = b.conv(cat, 16, relu=False)
    assert_ort_steps_zero(b, out, targets=["llvm -mcpu=haswell"])


@pytest.mark.parametrize("reader", ["grouped", "shuffle"])
def test_conv_output_also_read_by_a_channel_mixing_op_keeps_its_order(reader):
    """A conv output read by a groups=1 conv and by a grouped conv (ResNeXt/RegNet) or a channel
    shuffle (ShuffleNet: Reshape/Transpose/Reshape): no reordering may leak into the other reader."""
    b = QDQ((1, 8, 6, 6), seed=2)
    a = b.conv(b.top, 32, k=3, relu=False)
    c = b.conv(a, 32)
    if reader == "grouped":
        d = b.conv(a, 32, k=3, group=4)
    else:
        shape = b.init(np.array([1, 4, 8, 6, 6], "int64"))
        back = b.init(np.array([1, 32, 6, 6], "int64"))
        r = b.op("Reshape", [a, shape], fn=lambda v, _s: v.reshape(v.shape[0], 4, 8, 6, 6))
        t = b.op("Transpose", [r], fn=lambda v: v.transpose(0, 2, 1, 3, 4), perm=[0, 2, 1, 3, 4])
        d = b.op("Reshape", [t, back], fn=lambda v, _s: v.reshape(v.shape[0], 32, 6, 6), quantize=True)
    s_ = b.op("Add", [c, d], quantize=True)
    out = b.conv(s_, 16, relu=False)
    assert_ort_steps_zero(b, out, targets=["llvm -mcpu=haswell"])


@pytest.mark.parametrize("op", ["Mul", "Sub"])
def test_channelwise_product_of_two_reordered_convs(op):
    """Squeeze-excite's shape without its activation: a conv output times (or minus) a per-channel
    (1x1-image) conv output, read by a conv: both producers are reordered alike (qnn.mul/subtract
    with scalar parameters are channel-blind) and the broadcast keeps them aligned."""
    b = QDQ((1, 8, 6, 6), seed=9)
    a = b.conv(b.top, 32, k=3, relu=False)
    s = b.conv(b.op("GlobalAveragePool", [b.top], quantize=True), 32, relu=False)
    y = b.op(op, [a, s], fn={"Mul": np.multiply, "Sub": np.subtract}[op], quantize=True)
    out = b.conv(y, 16, relu=False)
    assert_ort_steps_zero(b, out, targets=["llvm -mcpu=haswell"])


@pytest.mark.parametrize("hw", [13, 4])
def test_odd_shapes_chain(hw):
    """One model through the shapes the AVX2 kernels split on: 3 input channels, channel counts
    that are not multiples of 8, 3x3 stride 1 (Winograd) on odd and tiny images, stride 2,
    5x5 and 7x7 kernels, a grouped and a depthwise conv, a residual add, 1x1 on a 1x1 image."""
    b = QDQ((1, 3, hw, hw), seed=3)
    y = b.conv(b.top, 12, k=3)
    y = b.conv(y, 20, k=7, stride=2)
    y = b.conv(y, 24, k=3)
    r = b.conv(y, 40, relu=False)
    z = b.conv(b.conv(r, 16, k=5), 40, k=3, relu=False)
    y = b.op("Add", [r, z], quantize=True)
    y = b.conv(y, 40, k=3, group=4)
    y = b.conv(y, 40, k=3, group=40)
    y = b.conv(y, 12, k=3)
    g = b.op("GlobalAveragePool", [y], quantize=True)
    out = b.conv(g, 16, relu=False)
    assert_ort_steps_zero(b, out, targets=TARGETS if hw == 13 else TARGETS[:1])  # tiny images: AVX2 only


def test_average_pool_with_its_input_quantization():
    """DenseNet's transition: a conv output (odd zero point) average-pooled 2x2/2, the pool's output
    quantized with the input's scale and zero point (what onnxruntime's quantizer writes): before
    f7c84d6 kiln added the zero point after rounding, 1 step off at every tie. (One Q -> DQ for the
    conv output: a second Q -> DQ pair after it is merged by onnxruntime's DoubleQDQPairsRemover
    into one with a new scale and zero point, which changes the integers.)"""
    b = QDQ((1, 8, 8, 8), seed=6, n_inputs=4)
    y = b.conv(b.top, 16, k=3, relu=False, zp=61)
    out = b.op("AveragePool", [y], fn=lambda v: v.reshape(v.shape[0], 16, 4, 2, 4, 2).mean(axis=(3, 5)),
               quantize=True, params=(b.scale[y], 61), kernel_shape=[2, 2], strides=[2, 2])
    assert_ort_steps_zero(b, out)


# -- full-size sweep (heavy): torchvision's architectures, random weights --------------------------------

SWEEP_MODELS = ["resnet18", "resnext50_32x4d", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
                pytest.param("densenet121", marks=pytest.mark.xfail(
                    strict=True, raises=AssertionError,
                    reason="8 output steps at 96 px after f7c84d6 (17 before): not bisected; onnxruntime keeps "
                           "62 float BatchNormalizations after the concats and fuses QLinearConcat")),
                "squeezenet1_1", "shufflenet_v2_x0_5", "regnet_x_400mf", "googlenet"]


def _torchvision_qdq(name: str, tmpdir: str, image: int = 96, fmt: str = "QDQ", per_channel: bool = True):
    """torchvision's ``name`` (random weights; every batch norm's statistics set from random images so
    no layer's range vanishes), exported at opset 17, batch norms folded, quantized by onnxruntime
    (``fmt``, u8 activations, s8 weights, 8 calibration images)."""
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    ort_quant = pytest.importorskip("onnxruntime.quantization")
    from onnxruntime.quantization.shape_inference import quant_pre_process

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
    from int8 import fold_batch_norms

    torch.manual_seed(0)
    kw = dict(aux_logits=False, init_weights=True, transform_input=False) if name == "googlenet" else {}
    m = getattr(tv.models, name)(weights=None, **kw)
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.reset_running_stats()
            mod.momentum = None
            torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
            torch.nn.init.uniform_(mod.bias, -0.2, 0.2)
    m.train()
    with torch.no_grad():
        for _ in range(4):
            m(torch.randn(4, 3, image, image))
    m.eval()
    src, pre, dst = (os.path.join(tmpdir, f"{name}_{f}.onnx") for f in ("f", "pre", "q"))
    torch.onnx.export(m, torch.randn(1, 3, image, image), src, dynamo=False, opset_version=17,
                      input_names=["data"], output_names=["out"])
    onnx.save(fold_batch_norms(onnx.load(src)), src)
    quant_pre_process(src, pre, skip_symbolic_shape=True)
    rng = np.random.default_rng(1)

    class Reader(ort_quant.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"data": rng.standard_normal((1, 3, image, image)).astype("float32")} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)

    ort_quant.quantize_static(pre, dst, Reader(), quant_format=getattr(ort_quant.QuantFormat, fmt),
                              per_channel=per_channel, activation_type=ort_quant.QuantType.QUInt8,
                              weight_type=ort_quant.QuantType.QInt8)
    return onnx.load(dst)


@pytest.mark.heavy
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", SWEEP_MODELS)
def test_torchvision_int8_equals_onnxruntime(name, target, tmp_path):
    """Each architecture quantized by onnxruntime (QDQ, per-channel) gives onnxruntime's bytes on
    every target (0 output steps; onnxruntime's u8 x s8 sums are exact on VNNI hosts, so the run
    is skipped elsewhere), for inputs inside and at twice the calibration range. (Inputs three
    times the range saturate: onnxruntime's fused QLinearMul then rounds a squeeze-excite product
    differently from DequantizeLinear -> Mul -> QuantizeLinear in ~0.1% of elements, kiln gives
    the latter: mobilenet_v3_small 4 steps; a reference ambiguity, left out.)"""
    from kiln.target.cpu_facts import cpu_facts

    if not any("vnni" in f for f in cpu_facts("llvm").features):
        pytest.skip("onnxruntime's AVX2 u8 x s8 kernel saturates pair sums: no exact reference on this host")
    model = _torchvision_qdq(name, str(tmp_path))
    from onnx import numpy_helper

    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if n.output[0] == out and n.op_type == "DequantizeLinear")
    step = float(numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == node.input[1])))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    if why_host_cannot_run(target):
        pytest.skip(f"{target}: {why_host_cannot_run(target)} (built only)")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    rng = np.random.default_rng(7)
    for t in range(2):
        x = (rng.standard_normal((1, 3, 96, 96)) * (1 + t)).astype("float32")
        m.set_input(data=x)
        m.run()
        steps = np.abs(m.get_output(0).numpy().astype("float64") - sess.run(None, {"data": x})[0]).max() / step
        assert steps == 0, f"{name} on {target}: {steps:.1f} output steps off onnxruntime"
