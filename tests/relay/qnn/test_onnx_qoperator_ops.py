"""onnxruntime's QOperator ops one node at a time against onnxruntime itself: com.microsoft
QLinearAdd/Mul/Concat/AveragePool/GlobalAveragePool/Sigmoid/LeakyRelu/Softmax and QGemm, plus
1-D QLinearConv. Table ops and integer ops agree exactly or within one step at exact ties
(kiln rounds ties up, onnxruntime to even); pools and softmax compute in float32 inside."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from onnx_models import run_ort  # noqa: E402

from kiln import relay  # noqa: E402
from qnn_run import run  # noqa: E402

MS = "com.microsoft"
RNG = np.random.default_rng(4)
X = RNG.integers(0, 256, (1, 4, 5, 5)).astype("uint8")
Q = {"xs": np.float32(0.05), "xz": np.uint8(120), "ys": np.float32(0.03), "yz": np.uint8(100)}


def _model(op, ins, consts, attrs=None, domain=MS, x=X, out_type=TensorProto.UINT8):
    node = helper.make_node(op, ins, ["y"], domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype),
                                                                          list(x.shape))],
                              [helper.make_tensor_value_info("y", out_type, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)])


CASES = {
    "QLinearAdd": (_model("QLinearAdd", ["x", "xs", "xz", "x2", "ys", "yz", "xs", "yz"],
                          {**Q, "x2": RNG.integers(0, 256, (4, 1, 1)).astype("uint8")}), 1),
    "QLinearMul": (_model("QLinearMul", ["x", "xs", "xz", "x", "ys", "yz", "ys", "yz"], Q), 1),
    "QLinearConcat": (_model("QLinearConcat", ["ys", "yz", "x", "xs", "xz", "x", "ys", "yz"], Q, {"axis": 1}), 1),
    "QLinearAveragePool": (_model("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], Q,
                                  {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}), 0),
    "QLinearGlobalAveragePool": (_model("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], Q,
                                        {"channels_last": 0}), 1),
    "QLinearSigmoid": (_model("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], Q), 0),
    "QLinearLeakyRelu": (_model("QLinearLeakyRelu", ["x", "xs", "xz", "ys", "yz"], Q, {"alpha": 0.1}), 1),
    "QLinearSoftmax": (_model("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"],
                              {**Q, "ys": np.float32(1 / 256), "yz": np.uint8(0)}, {"axis": -1, "opset": 13}), 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_qoperator_op_matches_onnxruntime(name):
    model, steps = CASES[name]
    want = run_ort(model, {"x": X})[0]
    mod, _ = relay.frontend.from_onnx(model)
    got = run(mod, {"x": X})[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.max() <= steps, (name, diff.max())
    assert np.mean(diff == 0) > 0.9


def test_qgemm_with_output_scale_and_bias():
    a = RNG.integers(0, 256, (3, 16)).astype("uint8")
    b = RNG.integers(-60, 60, (8, 16)).astype("int8")  # transB
    consts = {"as": np.float32(0.02), "az": np.uint8(128), "b": b, "bs": np.float32(0.01), "bz": np.int8(0),
              "c": RNG.integers(-500, 500, 8).astype("int32"), "ys": np.float32(0.05), "yz": np.uint8(128)}
    model = _model("QGemm", ["x", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], consts, {"transB": 1, "alpha": 1.0},
                   x=a)
    want = run_ort(model, {"x": a})[0]
    mod, _ = relay.frontend.from_onnx(model)
    got = run(mod, {"x": a})[0]
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_qlinearconv_1d():
    x = RNG.integers(0, 256, (1, 3, 11)).astype("uint8")
    consts = {"xs": np.float32(0.02), "xz": np.uint8(130), "w": RNG.integers(-60, 60, (5, 3, 3)).astype("int8"),
              "ws": np.full(5, 0.01, "float32"), "wz": np.zeros(5, "int8"), "ys": np.float32(0.04),
              "yz": np.uint8(120)}
    model = _model("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], consts,
                   {"pads": [1, 1], "strides": [2]}, domain="", x=x)
    want = run_ort(model, {"x": x})[0]
    mod, _ = relay.frontend.from_onnx(model)
    got = run(mod, {"x": x})[0]
    assert got.shape == want.shape == (1, 5, 6)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


@pytest.mark.parametrize("op,ins,msg", [
    ("QLinearAdd", ["x", "xs", "xz"], "has 3 inputs .* QLinearAdd takes 7 to 8"),
    ("QLinearConcat", ["ys", "yz", "x", "xs", "xz"], "required attribute 'axis'"),
    ("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], "required attribute 'kernel_shape'"),
])
def test_malformed_contrib_node_is_one_error(op, ins, msg):
    from kiln.errors import FileFormatError
    model = _model(op, ins, Q)
    with pytest.raises(FileFormatError, match=msg) as info:
        relay.frontend.from_onnx(model)
    assert f"{op} node" in str(info.value) and "\n" not in str(info.value)
