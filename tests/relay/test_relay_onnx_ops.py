"""One ONNX node at a time through from_onnx + the reference executor, against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_models import run_ort, single_node

from kiln import relay
from kiln.relay import reference

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype("float32")


def pos(*shape):
    return R.uniform(0.5, 2.0, shape).astype("float32")


def i64(*values):
    return np.array(values, dtype="int64")


X = f32(2, 3, 4, 5)
IMG = f32(1, 3, 9, 9)

# (id, op, graph inputs, attrs, initializers, opset)
CASES = [
    ("relu", "Relu", {"x": X}, {}, {}, 13),
    ("leaky", "LeakyRelu", {"x": X}, {"alpha": 0.2}, {}, 13),
    ("clip", "Clip", {"x": X}, {}, {"lo": np.array(-0.5, "float32"), "hi": np.array(0.5, "float32")}, 13),
    ("sigmoid", "Sigmoid", {"x": X}, {}, {}, 13),
    ("tanh", "Tanh", {"x": X}, {}, {}, 13),
    ("erf", "Erf", {"x": X}, {}, {}, 13),
    ("sqrt", "Sqrt", {"x": pos(3, 4)}, {}, {}, 13),
    ("exp", "Exp", {"x": X}, {}, {}, 13),
    ("log", "Log", {"x": pos(3, 4)}, {}, {}, 13),
    ("neg", "Neg", {"x": X}, {}, {}, 13),
    ("abs", "Abs", {"x": X}, {}, {}, 13),
    ("add_bcast", "Add", {"a": X, "b": f32(4, 1)}, {}, {}, 13),
    ("sub", "Sub", {"a": X, "b": f32(5)}, {}, {}, 13),
    ("mul", "Mul", {"a": X, "b": f32(1, 3, 1, 1)}, {}, {}, 13),
    ("div", "Div", {"a": X, "b": pos(5)}, {}, {}, 13),
    ("pow", "Pow", {"a": pos(3, 4), "b": f32(3, 4)}, {}, {}, 13),
    ("max3", "Max", {"a": f32(3, 4), "b": f32(4), "c": f32(3, 1)}, {}, {}, 13),
    ("mean3", "Mean", {"a": f32(3, 4), "b": f32(4), "c": f32(3, 1)}, {}, {}, 13),
    ("less", "Less", {"a": f32(3, 4), "b": f32(4)}, {}, {}, 13),
    ("equal_int", "Equal", {"a": i64(1, 2, 3), "b": i64(1, 0, 3)}, {}, {}, 13),
    ("where", "Where", {"c": R.random((3, 4)) > 0.5, "a": f32(3, 4), "b": f32(4)}, {}, {}, 13),
    ("and", "And", {"a": R.random((4,)) > 0.5, "b": R.random((4,)) > 0.5}, {}, {}, 13),
    ("not", "Not", {"a": R.random((4,)) > 0.5}, {}, {}, 13),
    ("cast", "Cast", {"x": X}, {"to": TensorProto.INT32}, {}, 13),
    ("conv_pads_group", "Conv", {"x": f32(1, 4, 9, 9)}, {"pads": [1, 0, 2, 1], "strides": [2, 1], "group": 2,
                                                          "dilations": [1, 2]}, {"w": f32(6, 2, 3, 3), "b": f32(6)}, 13),
    ("conv_same_upper", "Conv", {"x": IMG}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, {"w": f32(4, 3, 4, 4)}, 13),
    ("conv_transpose", "ConvTranspose", {"x": f32(1, 4, 5, 5)}, {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                                 "output_padding": [1, 1]}, {"w": f32(4, 3, 3, 3)}, 13),
    ("gemm", "Gemm", {"a": f32(3, 5)}, {"alpha": 0.5, "beta": 2.0, "transB": 1}, {"b": f32(4, 5), "c": f32(4)}, 13),
    ("gemm_transA", "Gemm", {"a": f32(5, 3)}, {"transA": 1}, {"b": f32(5, 4)}, 13),
    ("matmul_2d", "MatMul", {"a": f32(3, 5)}, {}, {"b": f32(5, 4)}, 13),
    ("matmul_nd_weight", "MatMul", {"a": f32(2, 3, 5)}, {}, {"b": f32(5, 4)}, 13),
    ("matmul_batched_bcast", "MatMul", {"a": f32(2, 1, 3, 5), "b": f32(4, 5, 6)}, {}, {}, 13),
    ("matmul_vec", "MatMul", {"a": f32(5), "b": f32(2, 5, 3)}, {}, {}, 13),
    ("batchnorm", "BatchNormalization", {"x": IMG}, {"epsilon": 1e-3},
     {"s": pos(3), "b": f32(3), "m": f32(3), "v": pos(3)}, 13),
    ("maxpool_ceil", "MaxPool", {"x": IMG}, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, {}, 13),
    ("maxpool_pads", "MaxPool", {"x": IMG}, {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0]}, {}, 13),
    ("avgpool_excl", "AveragePool", {"x": IMG}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, {}, 13),
    ("avgpool_incl", "AveragePool", {"x": IMG}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                 "count_include_pad": 1}, {}, 13),
    ("gap", "GlobalAveragePool", {"x": IMG}, {}, {}, 13),
    ("softmax", "Softmax", {"x": X}, {"axis": 1}, {}, 13),
    ("softmax_opset11", "Softmax", {"x": X}, {"axis": 2}, {}, 11),
    ("logsoftmax", "LogSoftmax", {"x": X}, {}, {}, 13),
    ("layernorm", "LayerNormalization", {"x": X}, {"epsilon": 1e-5}, {"g": pos(5), "b": f32(5)}, 17),
    ("layernorm_axis", "LayerNormalization", {"x": X}, {"axis": 2}, {"g": pos(4, 5), "b": f32(4, 5)}, 17),
    ("reshape", "Reshape", {"x": X}, {}, {"s": i64(0, -1, 5)}, 13),
    ("flatten", "Flatten", {"x": X}, {"axis": 2}, {}, 13),
    ("transpose", "Transpose", {"x": X}, {"perm": [2, 0, 3, 1]}, {}, 13),
    ("concat", "Concat", {"a": X, "b": f32(2, 1, 4, 5)}, {"axis": 1}, {}, 13),
    ("split_input", "Split", {"x": X}, {"axis": 3}, {"s": i64(2, 3)}, 13),
    ("split_num_outputs", "Split", {"x": f32(7, 2)}, {"axis": 0, "num_outputs": 3}, {}, 18),
    ("slice", "Slice", {"x": X}, {}, {"st": i64(1, -1), "en": i64(3, -4), "ax": i64(1, 3), "sp": i64(1, -1)}, 13),
    ("slice_big_end", "Slice", {"x": X}, {}, {"st": i64(0), "en": i64(9223372036854775807), "ax": i64(2)}, 13),
    ("gather_neg", "Gather", {"x": X}, {"axis": 1}, {"i": np.array([[0, -1], [2, 1]], "int64")}, 13),
    ("gather_elements", "GatherElements", {"x": f32(3, 4)}, {"axis": 1}, {"i": np.array([[0, 3], [1, -1], [2, 2]])}, 13),
    ("squeeze", "Squeeze", {"x": f32(2, 1, 3, 1)}, {}, {"a": i64(1, -1)}, 13),
    ("unsqueeze", "Unsqueeze", {"x": f32(2, 3)}, {}, {"a": i64(0, -1)}, 13),
    ("unsqueeze_opset11", "Unsqueeze", {"x": f32(2, 3)}, {"axes": [1]}, {}, 11),
    ("expand", "Expand", {"x": f32(3, 1)}, {}, {"s": i64(2, 3, 4)}, 13),
    ("pad_const", "Pad", {"x": f32(2, 3)}, {}, {"p": i64(1, 0, 2, 1), "v": np.array(1.5, "float32")}, 13),
    ("pad_reflect", "Pad", {"x": f32(3, 4)}, {"mode": "reflect"}, {"p": i64(1, 2, 1, 2)}, 13),
    ("resize_nearest", "Resize", {"x": f32(1, 2, 3, 4)}, {"mode": "nearest"},
     {"roi": np.zeros(0, "float32"), "sc": np.array([1, 1, 2, 2], "float32")}, 13),
    ("resize_linear_sizes", "Resize", {"x": f32(1, 2, 3, 4)}, {"mode": "linear"},
     {"roi": np.zeros(0, "float32"), "sc": np.zeros(0, "float32"), "sz": i64(1, 2, 6, 5)}, 13),
    ("resize_align", "Resize", {"x": f32(1, 2, 3, 4)}, {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
     {"roi": np.zeros(0, "float32"), "sc": np.array([1, 1, 2, 2], "float32")}, 13),
    ("tile", "Tile", {"x": f32(2, 3)}, {}, {"r": i64(2, 1)}, 13),
    ("reduce_sum", "ReduceSum", {"x": X}, {"keepdims": 0}, {"a": i64(1, 3)}, 13),
    ("reduce_mean", "ReduceMean", {"x": X}, {"axes": [-1]}, {}, 13),
    ("reduce_max_all", "ReduceMax", {"x": X}, {"keepdims": 0}, {}, 13),
    ("reduce_l2", "ReduceL2", {"x": X}, {"axes": [2]}, {}, 13),
    ("reduce_logsumexp", "ReduceLogSumExp", {"x": X}, {"axes": [1], "keepdims": 0}, {}, 13),
    ("reduce_mean_18", "ReduceMean", {"x": X}, {}, {"a": i64(0, 2)}, 18),
    ("argmax", "ArgMax", {"x": X}, {"axis": 2, "keepdims": 0}, {}, 13),
    ("argmin_last", "ArgMin", {"x": np.array([[1, 0, 0], [2, 2, 1]], "float32")}, {"axis": 1, "select_last_index": 1}, {}, 13),
    ("shape", "Shape", {"x": X}, {"start": 1, "end": -1}, {}, 15),
    ("constant_of_shape", "ConstantOfShape", {}, {"value": helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])},
     {"s": i64(2, 3)}, 13),
    ("range", "Range", {}, {}, {"a": np.array(1, "int64"), "b": np.array(10, "int64"), "c": np.array(3, "int64")}, 13),
    ("identity", "Identity", {"x": X}, {}, {}, 13),
    ("dropout", "Dropout", {"x": X}, {}, {}, 13),
    ("sum_variadic", "Sum", {"a": f32(3), "b": f32(3)}, {}, {}, 13),
    ("prelu", "PRelu", {"x": X}, {}, {"s": f32(5)}, 13),
    ("hardswish", "HardSwish", {"x": X}, {}, {}, 14),
    ("flatten_neg_axis", "Flatten", {"x": X}, {"axis": -1}, {}, 13),
    ("clip_runtime_bounds", "Clip", {"x": X, "lo": np.array(-0.3, "float32"), "hi": np.array(0.4, "float32")}, {}, {}, 13),
    ("layernorm_stats", "LayerNormalization", {"x": X}, {"axis": 2}, {"g": pos(4, 5)}, 17, 3),
    ("slice_opset9_attrs", "Slice", {"x": X}, {"starts": [1], "ends": [3], "axes": [2]}, {}, 9),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_onnxruntime(case):
    _, op, inputs, attrs, consts, opset = case[:6]
    n_out = case[6] if len(case) > 6 else {"Split": 2 if "s" in consts else 3}.get(op, 1)
    model = single_node(op, inputs, attrs, consts, opset=opset, n_out=n_out)
    mod, params = relay.frontend.from_onnx(model)
    got = reference.run(mod, inputs, params)
    got = list(got) if isinstance(got, tuple) else [got]
    want = run_ort(model, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
