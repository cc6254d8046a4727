"""Bilinear resize on CPUs in two stages (topi/image/resize.py ``separable``): rows along W, then
rows blended along H. Checked against onnxruntime's Resize and the float64 reference, alone and
with consumers FuseOps may group it with (an elementwise op, softmax, argmax)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

ort = pytest.importorskip("onnxruntime")


def _run(mod, x, params=None):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.run(x=x)
    return gm.get_output(0).numpy(), lib


@pytest.mark.parametrize("mode", ["half_pixel", "align_corners", "pytorch_half_pixel", "asymmetric"])
@pytest.mark.parametrize("out_hw", [(37, 52), (9, 5), (1, 8)])
def test_bilinear_matches_onnxruntime(mode, out_hw):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 9, 11)).astype("float32")
    sizes = numpy_helper.from_array(np.array([1, 3, *out_hw], "int64"), "sizes")
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode=mode)
    graph = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, *out_hw])],
                              initializer=[sizes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    mod, params = relay.frontend.from_onnx(model)
    got, lib = _run(mod, x, params)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # two float32 lerps of values ~N(0, 1): a few ulps
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tail", ["relu", "softmax", "argmax"])
def test_upsample_fused_with_consumers(tail):
    x = relay.var("x", shape=(1, 5, 6, 7), dtype="float32")
    y = relay.image.resize2d(x, (24, 40), method="linear", coordinate_transformation_mode="half_pixel")
    out = {"relu": lambda v: relay.nn.relu(v), "softmax": lambda v: relay.nn.softmax(v, axis=1),
           "argmax": lambda v: relay.argmax(v, axis=1)}[tail](y)
    data = np.random.default_rng(2).standard_normal((1, 5, 6, 7)).astype("float32")
    got, _ = _run(tvm.IRModule.from_expr(relay.Function([x], out)), data)
    # the float64 reference resize, then the tail in numpy
    from kiln.relay.op.image import RESIZE2D
    ref = RESIZE2D.reference(y.attrs, data.astype(np.float64))
    want = {"relu": lambda v: np.maximum(v, 0), "argmax": lambda v: np.argmax(v, axis=1),
            "softmax": lambda v: np.exp(v - v.max(1, keepdims=True)) / np.exp(v - v.max(1, keepdims=True)).sum(1, keepdims=True)}[tail](ref)
    if tail == "argmax":
        close = np.sort(ref, axis=1)[:, -1] - np.sort(ref, axis=1)[:, -2] < 1e-5  # near-ties may differ
        assert (got.astype(np.int64) == want)[~close].all()
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
