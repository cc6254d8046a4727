"""ai.onnx.ml Binarizer and ArrayFeatureExtractor, and MelWeightMatrix (computed at import),
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

ort = pytest.importorskip("onnxruntime")


def _run_both(model, feed):
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.run(**feed)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    return [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())], want


def test_binarizer_and_array_feature_extractor():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7)).astype("float32")
    idx = np.array([6, 0, 3, 3], "int64")
    nodes = [helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", threshold=0.25),
             helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["f"], domain="ai.onnx.ml")]
    graph = helper.make_graph(nodes, "ml", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("f", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(idx, "i")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])
    got, want = _run_both(model, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("bins, dft, rate, lo, hi", [(8, 16, 8192, 0.0, 4096.0), (20, 400, 16000, 60.0, 7600.0)])
def test_mel_weight_matrix(bins, dft, rate, lo, hi):
    inits = [numpy_helper.from_array(np.array(v, d), n) for v, d, n in
             ((bins, "int32", "n"), (dft, "int32", "d"), (rate, "int32", "r"), (lo, "float32", "lo"), (hi, "float32", "hi"))]
    x = np.ones((1, dft // 2 + 1), "float32")
    nodes = [helper.make_node("MelWeightMatrix", ["n", "d", "r", "lo", "hi"], ["m"]),
             helper.make_node("MatMul", ["x", "m"], ["y"])]
    graph = helper.make_graph(nodes, "mel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got, want = _run_both(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
