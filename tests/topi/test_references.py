"""The numpy references in topi.testing agree with onnxruntime, so the kernel tests check
against something independent of kiln."""

import numpy as np
import pytest

from kiln.topi import testing

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(3)


def run_node(node, x, inits=()):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("c,o,g,k,s,p,d", [(4, 6, 2, 3, 2, 1, 1), (3, 5, 1, 3, 1, 2, 2), (4, 8, 4, 3, 1, 1, 1)])
def test_conv2d_reference(c, o, g, k, s, p, d):
    x = RNG.standard_normal((1, c, 9, 8)).astype("float32")
    w = RNG.standard_normal((o, c // g, k, k)).astype("float32")
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[s, s], pads=[p] * 4, dilations=[d, d], group=g)
    want = run_node(node, x, [numpy_helper.from_array(w, "w")])
    np.testing.assert_allclose(testing.conv2d_nchw_python(x, w, s, p, d, g), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,og,g,k,s,p,op,d", [(4, 3, 1, 3, 2, 1, 1, 1), (4, 2, 2, 3, 3, 0, 2, 1), (2, 3, 1, 2, 2, 1, 0, 2)])
def test_conv2d_transpose_reference(c, og, g, k, s, p, op, d):
    x = RNG.standard_normal((1, c, 5, 6)).astype("float32")
    w = RNG.standard_normal((c, og, k, k)).astype("float32")
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[s, s], pads=[p] * 4, output_padding=[op, op],
                            group=g, dilations=[d, d])
    want = run_node(node, x, [numpy_helper.from_array(w, "w")])
    np.testing.assert_allclose(testing.conv2d_transpose_nchw_python(x, w, s, p, op, g, d), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op,ceil,cip", [("MaxPool", 0, 0), ("MaxPool", 1, 0), ("AveragePool", 1, 1), ("AveragePool", 0, 0)])
def test_pool_reference(op, ceil, cip):
    x = RNG.standard_normal((1, 2, 11, 10)).astype("float32")
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": ceil}
    if op == "AveragePool":
        attrs["count_include_pad"] = cip
    want = run_node(helper.make_node(op, ["x"], ["y"], **attrs), x)
    got = testing.pool2d_python(x, (3, 3), (2, 2), (1, 0, 1, 1), "max" if op == "MaxPool" else "avg",
                                ceil_mode=bool(ceil), count_include_pad=bool(cip))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("method,nearest", [("linear", None), ("nearest", "round_prefer_floor"), ("nearest", "floor"),
                                            ("nearest", "round_prefer_ceil")])
def test_resize_reference(mode, method, nearest):
    x = RNG.standard_normal((1, 2, 5, 7)).astype("float32")
    attrs = {"mode": method, "coordinate_transformation_mode": mode}
    if nearest:
        attrs["nearest_mode"] = nearest
    sizes = numpy_helper.from_array(np.array([1, 2, 9, 4], dtype="int64"), "sizes")
    want = run_node(helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs), x, [sizes])
    got = testing.resize2d_python(x, (9, 4), "NCHW", "linear" if method == "linear" else "nearest_neighbor", mode,
                                  nearest or "round_prefer_floor")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
