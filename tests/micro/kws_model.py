"""A keyword-spotting-size CNN built with onnx.helper (random weights), for the micro tests.

Input 1x1x20x10 (MFCC frames x coefficients); conv 3x3 -> ReLU -> depthwise 3x3 -> ReLU ->
pointwise 1x1 -> ReLU -> average pool -> flatten -> dense 12 -> softmax.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def kws_cnn(seed: int = 0):
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, shape, scale):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("float32"), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    x = node("Conv", ["input", w("w1", (8, 1, 3, 3), 0.5), w("b1", (8,), 0.1)], "c1",
             kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 1])
    x = node("Relu", [x], "r1")
    x = node("Conv", [x, w("w2", (8, 1, 3, 3), 0.5), w("b2", (8,), 0.1)], "c2",
             kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8)
    x = node("Relu", [x], "r2")
    x = node("Conv", [x, w("w3", (16, 8, 1, 1), 0.4), w("b3", (16,), 0.1)], "c3", kernel_shape=[1, 1])
    x = node("Relu", [x], "r3")
    x = node("AveragePool", [x], "p1", kernel_shape=[2, 2], strides=[2, 2])
    x = node("Flatten", [x], "f1", axis=1)
    x = node("Gemm", [x, w("w4", (12, 16 * 5 * 5), 0.1), w("b4", (12,), 0.1)], "g1", transB=1)
    out = node("Softmax", [x], "output", axis=1)
    graph = helper.make_graph(nodes, "kws", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 20, 10])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 12])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    data = rng.standard_normal((1, 1, 20, 10)).astype("float32")
    return model, {"input": data}


def run_ort(model, inputs: dict):
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)
