"""ONNX models built with onnx.helper and random weights, for the importer and e2e tests.

``resnet18()``, ``resnet50()``, ``mobilenet_v2()`` and ``bert_block()`` return ``(model, inputs)`` where
``inputs`` is ``{name: numpy array}``. ``run_ort(model, inputs)`` runs onnxruntime.
Reuse from other test folders with ``from relay.onnx_models import resnet18``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class GraphBuilder:
    """Accumulates nodes and initializers; names are generated so blocks compose freely."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def init(self, prefix: str, value: np.ndarray) -> str:
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def weight(self, prefix: str, shape, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        scale = scale if scale is not None else np.sqrt(2.0 / fan_in)
        return self.init(prefix, (self.rng.standard_normal(shape) * scale).astype("float32"))

    def op(self, op_type: str, inputs: list, n_out: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, bias=False):
        pad = k // 2 if pad is None else pad
        ins = [x, self.weight("w", (cout, cin // group, k, k))]
        if bias:
            ins.append(self.init("b", (self.rng.standard_normal(cout) * 0.1).astype("float32")))
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=group)

    def bn(self, x, c, gamma: float = 1.0):
        r = self.rng
        return self.op("BatchNormalization", [
            x, self.init("gamma", (r.uniform(0.5, 1.5, c) * gamma).astype("float32")),
            self.init("beta", (r.standard_normal(c) * 0.1).astype("float32")),
            self.init("mean", (r.standard_normal(c) * 0.1).astype("float32")),
            self.init("var", r.uniform(0.5, 1.5, c).astype("float32"))], epsilon=1e-5)

    def dense(self, x, cin, cout):
        w = self.weight("fc_w", (cin, cout), scale=np.sqrt(1.0 / cin))
        b = self.init("fc_b", (self.rng.standard_normal(cout) * 0.1).astype("float32"))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def model(self, inputs: dict, output: str, opset: int = 13, out_shape=None) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "kiln_test",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=False) if out_shape is not None else None
        return m


def resnet18(batch: int = 1, image: int = 224, classes: int = 1000, seed: int = 0):
    g = GraphBuilder(seed)
    x = g.op("Relu", [g.bn(g.conv("data", 3, 64, 7, 2, 3), 64)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512]):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = g.op("Relu", [g.bn(g.conv(x, cin, cout, 3, stride), cout)])
            y = g.bn(g.conv(y, cout, cout, 3), cout)
            short = g.bn(g.conv(x, cin, cout, 1, stride, 0), cout) if stride != 1 or cin != cout else x
            x = g.op("Relu", [g.op("Add", [y, short])])
            cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    w = g.weight("fc_w", (classes, 512), scale=np.sqrt(1.0 / 512))
    b = g.init("fc_b", np.zeros(classes, "float32"))
    out = g.op("Gemm", [x, w, b], transB=1)
    data = np.random.default_rng(seed + 1).standard_normal((batch, 3, image, image)).astype("float32")
    return g.model({"data": data.shape}, out), {"data": data}


def resnet50(batch: int = 1, image: int = 224, classes: int = 1000, seed: int = 0):
    """ResNet-50 v1.5 (torchvision's layout): bottleneck blocks 1x1 -> 3x3 (stride here) -> 1x1 x4."""
    g = GraphBuilder(seed)
    x = g.op("Relu", [g.bn(g.conv("data", 3, 64, 7, 2, 3), 64)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        cout = width * 4
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            y = g.op("Relu", [g.bn(g.conv(x, cin, width, 1, 1, 0), width)])
            y = g.op("Relu", [g.bn(g.conv(y, width, width, 3, stride), width)])
            # a small last gamma keeps the residual sum's scale (random weights do not normalize:
            # at gamma ~1 the sum doubles per block and overflows float16 by the last stage)
            y = g.bn(g.conv(y, width, cout, 1, 1, 0), cout, gamma=0.3)
            short = g.bn(g.conv(x, cin, cout, 1, stride, 0), cout) if stride != 1 or cin != cout else x
            x = g.op("Relu", [g.op("Add", [y, short])])
            cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    w = g.weight("fc_w", (classes, cin), scale=np.sqrt(1.0 / cin))
    b = g.init("fc_b", (g.rng.standard_normal(classes) * 0.1).astype("float32"))
    out = g.op("Gemm", [x, w, b], transB=1)
    data = np.random.default_rng(seed + 1).standard_normal((batch, 3, image, image)).astype("float32")
    return g.model({"data": data.shape}, out), {"data": data}


def mobilenet_v2(batch: int = 1, image: int = 224, classes: int = 1000, seed: int = 0, project_gamma: float = 1.0):
    """MobileNetV2; ``project_gamma`` scales the batch norm after each block's linear 1x1
    projection (below 1 the random network amplifies rounding less: float16 checks)."""
    g = GraphBuilder(seed)

    def cbr(x, cin, cout, k, stride=1, group=1, relu=True):
        y = g.bn(g.conv(x, cin, cout, k, stride, group=group), cout, gamma=1.0 if relu else project_gamma)
        return g.op("Clip", [y, g.init("lo", np.array(0.0, "float32")), g.init("hi", np.array(6.0, "float32"))]) if relu else y

    x = cbr("data", 3, 32, 3, 2)
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = cbr(x, cin, hidden, 1) if t != 1 else x
            y = cbr(y, hidden, hidden, 3, stride, group=hidden)
            y = cbr(y, hidden, c, 1, relu=False)
            x = g.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = cbr(x, cin, 1280, 1)
    x = g.op("Reshape", [g.op("GlobalAveragePool", [x]), g.init("shape", np.array([batch, -1], "int64"))])
    out = g.op("Gemm", [x, g.weight("fc_w", (1280, classes), scale=np.sqrt(1 / 1280)),
                        g.init("fc_b", np.zeros(classes, "float32"))])
    data = np.random.default_rng(seed + 1).standard_normal((batch, 3, image, image)).astype("float32")
    return g.model({"data": data.shape}, out), {"data": data}


def bert_block(batch: int = 1, seq: int = 16, hidden: int = 64, heads: int = 4, ffn: int = 256, seed: int = 0):
    """One transformer encoder layer (post-LN, erf GELU) with shape-computing Reshape inputs."""
    g = GraphBuilder(seed)
    x = "input"
    head_dim = hidden // heads

    def split_heads(t):
        shape = g.op("Shape", [t])
        b = g.op("Gather", [shape, g.init("i0", np.array([0], "int64"))], axis=0)
        s = g.op("Gather", [shape, g.init("i1", np.array([1], "int64"))], axis=0)
        new = g.op("Concat", [b, s, g.init("hd", np.array([heads, head_dim], "int64"))], axis=0)
        return g.op("Transpose", [g.op("Reshape", [t, new])], perm=[0, 2, 1, 3])

    q = split_heads(g.dense(x, hidden, hidden))
    k = split_heads(g.dense(x, hidden, hidden))
    v = split_heads(g.dense(x, hidden, hidden))
    scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = g.op("Div", [scores, g.init("scale", np.array(np.sqrt(head_dim), "float32"))])
    probs = g.op("Softmax", [scores], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.init("flat", np.array([0, 0, -1], "int64"))])
    attn = g.op("Add", [g.dense(ctx, hidden, hidden), x])

    def layer_norm(t):
        return g.op("LayerNormalization", [t, g.init("ln_g", g.rng.uniform(0.5, 1.5, hidden).astype("float32")),
                                           g.init("ln_b", (g.rng.standard_normal(hidden) * 0.1).astype("float32"))],
                    axis=-1, epsilon=1e-5)

    h = layer_norm(attn)
    f = g.dense(h, hidden, ffn)
    erf = g.op("Erf", [g.op("Div", [f, g.init("sqrt2", np.array(np.sqrt(2.0), "float32"))])])
    gelu = g.op("Mul", [g.op("Mul", [f, g.op("Add", [erf, g.init("one", np.array(1.0, "float32"))])]),
                        g.init("half", np.array(0.5, "float32"))])
    out = layer_norm(g.op("Add", [g.dense(gelu, ffn, hidden), h]))
    data = np.random.default_rng(seed + 1).standard_normal((batch, seq, hidden)).astype("float32")
    return g.model({"input": data.shape}, out, opset=17), {"input": data}


def single_node(op_type: str, inputs: dict, attrs: dict | None = None, consts: dict | None = None, opset: int = 13,
                n_out: int = 1) -> onnx.ModelProto:
    """A one-node model: ``inputs`` are graph inputs (name -> array), ``consts`` initializers."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, name="the_node", **(attrs or {}))
    graph = helper.make_graph(
        [node], "single",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outs],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    # onnxruntime wants typed graph outputs: let ONNX shape inference fill them in
    inferred = onnx.shape_inference.infer_shapes(m)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in m.graph.output:
        if out.name in known and known[out.name].type.tensor_type.elem_type:
            out.CopyFrom(known[out.name])
    return m


def run_ort(model: onnx.ModelProto, inputs: dict) -> list:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)
