"""MLPerf Tiny's keyword-spotting DS-CNN with the published layer shapes (random weights, BN folded
into the convs), built with onnx.helper for the micro tests and bench/micro.py.

Input 1x1x49x10 (49 MFCC frames x 10 coefficients, NCHW); conv 10x4, 64 filters, stride 2, 'same'
padding -> 25x5x64, ReLU; four blocks of depthwise 3x3 (64) + ReLU, pointwise 1x1 (64) + ReLU;
average pool 25x5; dense 12. (MLPerf Tiny v1.0, keyword_spotting/keras_model.py: ~2.7 M MACs,
~25 k parameters with batch-norm.)
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

SHAPE = (1, 1, 49, 10)
PUBLISHED = {"macs": 2_660_000, "params": 24_908}  # quoted beside ours by bench/micro.py


def ds_cnn(seed: int = 0):
    """(onnx model, {"input": array})."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def w(name, shape, fan_in):
        v = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in) if len(shape) > 1 else rng.standard_normal(shape) * 0.05
        inits.append(numpy_helper.from_array(v.astype("float32"), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    x = node("Conv", ["input", w("w0", (64, 1, 10, 4), 40), w("b0", (64,), 1)], "c0",
             kernel_shape=[10, 4], strides=[2, 2], pads=[4, 1, 5, 1])
    x = node("Relu", [x], "r0")
    for i in range(1, 5):
        x = node("Conv", [x, w(f"dw{i}", (64, 1, 3, 3), 9), w(f"db{i}", (64,), 1)], f"d{i}",
                 kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=64)
        x = node("Relu", [x], f"dr{i}")
        x = node("Conv", [x, w(f"pw{i}", (64, 64, 1, 1), 64), w(f"pb{i}", (64,), 1)], f"p{i}", kernel_shape=[1, 1])
        x = node("Relu", [x], f"pr{i}")
    x = node("AveragePool", [x], "pool", kernel_shape=[25, 5])
    x = node("Flatten", [x], "flat", axis=1)
    out = node("Gemm", [x, w("fc", (12, 64), 64), w("fcb", (12,), 1)], "output", transB=1)
    graph = helper.make_graph(nodes, "ds_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 12])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = np.random.default_rng(seed + 1).standard_normal(SHAPE).astype("float32")
    return model, {"input": x}


def counts() -> dict:
    """MACs and parameters of this network, from the layer shapes."""
    oh, ow, c = 25, 5, 64
    macs = oh * ow * c * 10 * 4 + 4 * (oh * ow * c * 9 + oh * ow * c * c) + c * 12
    params = (c * 40 + c) + 4 * (c * 9 + c + c * c + c) + (c * 12 + 12)
    return {"macs": macs, "params": params}
