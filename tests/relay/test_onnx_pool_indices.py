"""MaxPool's Indices output (flat indices into the input; storage_order 0 and 1) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from kiln.relay.frontend.onnx.backend import KilnBackend

ort = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [2, 1], "dilations": [2, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "storage_order": 1},
], ids=["pads", "ceil_dilated", "column_major"])
def test_max_pool_indices_match_onnxruntime(attrs):
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 8)).astype("float32")
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    got = KilnBackend.prepare(model).run([x])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
