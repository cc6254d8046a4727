"""GatherND, ScatterND, ScatterElements, CumSum, Trilu, Instance/GroupNormalization (issue 32 item 1).

The float node tests of these ops run by name from onnx_node_passing.txt (test_onnx_backend.py);
here: their integer node tests (outside that float selection), random cases against the numpy
references of the relay ops, and the errors for bad attributes.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend tests need the onnx package (pip install onnx)")
from onnx import TensorProto, helper  # noqa: E402

from kiln.errors import KilnError  # noqa: E402
from kiln.relay.frontend.onnx import backend  # noqa: E402

INT_CASES = ["test_gathernd_example_int32", "test_gathernd_example_int32_batch_dim1", "test_cumsum_1d_int32_exclusive",
             "test_cumsum_2d_int32", "test_tril", "test_tril_neg", "test_tril_one_row_neg", "test_tril_out_neg",
             "test_tril_out_pos", "test_tril_pos", "test_tril_square", "test_tril_square_neg", "test_tril_zero",
             "test_triu", "test_triu_neg", "test_triu_one_row", "test_triu_out_neg_out", "test_triu_out_pos",
             "test_triu_pos", "test_triu_square", "test_triu_square_neg", "test_triu_zero"]


@pytest.fixture(scope="module")
def int_cases():
    tests = {t.name: t for t in backend.node_tests(ops={"GatherND", "CumSum", "Trilu"}, float_only=False)}
    assert tests, f"no ONNX node test data under {backend.node_test_dir()}; install onnx<1.23"
    return tests


@pytest.mark.parametrize("name", INT_CASES)
def test_integer_node_case(int_cases, name):
    backend.run_node_test(int_cases[name])


def _run(node, inputs, opset=18, **outs):
    (y,) = backend.KilnBackend.run_node(node, inputs, opset_version=opset)
    return y


def _scatter_nd_numpy(data, idx, upd, reduction):
    out = data.copy()
    fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(reduction)
    for pos in np.ndindex(*idx.shape[:-1]):
        where = tuple(idx[pos])
        out[where] = upd[pos] if fn is None else fn(out[where], upd[pos])
    return out


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_random_slices(reduction):
    rng = np.random.default_rng(1)
    data = rng.standard_normal((5, 4, 3)).astype("float32")
    # distinct positions for "none" (ONNX leaves duplicates undefined there), repeats otherwise
    flat = rng.permutation(20)[:6] if reduction == "none" else rng.integers(0, 20, 6)
    idx = np.stack([flat // 4, flat % 4], -1).reshape(2, 3, 2).astype("int64")
    upd = rng.standard_normal((2, 3, 3)).astype("float32")
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=reduction)
    y = _run(node, [data, idx, upd])
    np.testing.assert_allclose(y, _scatter_nd_numpy(data, idx, upd, reduction), rtol=1e-6, atol=1e-6)


def test_gather_nd_masked_token_pick():
    # BERT-style exports pick the unmasked rows with GatherND over NonZero's output
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 7, 4)).astype("float32")
    idx = np.array([[0, 1], [0, 5], [1, -1], [1, 0]], "int64")
    y = _run(helper.make_node("GatherND", ["x", "i"], ["y"]), [x, idx])
    np.testing.assert_array_equal(y, x[idx[:, 0], idx[:, 1]])


def test_scatter_elements_smaller_indices_than_data():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, 5)).astype("float32")
    idx = np.array([[3, 0, 4], [1, 1, 2]], "int64")
    upd = rng.standard_normal((2, 3)).astype("float32")
    y = _run(helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction="add"), [data, idx, upd])
    want = data.copy()
    np.add.at(want, (np.arange(2)[:, None].repeat(3, 1), idx), upd)
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_cumsum_3d_middle_axis_float64():
    x = np.random.default_rng(4).standard_normal((2, 9, 3))
    node = helper.make_node("CumSum", ["x", "a"], ["y"], reverse=1)
    (y,) = backend.KilnBackend.run_node(node, [x, np.array(1, "int64")], opset_version=14)
    np.testing.assert_allclose(y, np.flip(np.cumsum(np.flip(x, 1), 1), 1), rtol=1e-12)


def test_group_norm_per_channel_scale_opset21():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 3, 2)).astype("float32")
    scale, bias = rng.standard_normal(6).astype("float32"), rng.standard_normal(6).astype("float32")
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-5)
    y = _run(node, [x, scale, bias], opset=21)
    g = x.reshape(2, 3, -1).astype("float64")
    ref = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(y, ref * scale[:, None, None] + bias[:, None, None], rtol=1e-4, atol=1e-5)


def _model(node, inputs, opset=18):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(node.output[0], inputs[0][1], None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_bad_reduction_names_the_node():
    from kiln import relay
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], name="sc", reduction="avg")
    model = _model(node, [("d", TensorProto.FLOAT, [4]), ("i", TensorProto.INT64, [1, 1]),
                          ("u", TensorProto.FLOAT, [1])])
    with pytest.raises(KilnError, match=r"ScatterND node 'sc'.*reduction='avg'"):
        relay.frontend.from_onnx(model)


def test_group_norm_groups_must_divide_channels():
    from kiln import relay
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn", num_groups=4)
    model = _model(node, [("x", TensorProto.FLOAT, [1, 6, 2]), ("s", TensorProto.FLOAT, [6]),
                          ("b", TensorProto.FLOAT, [6])], opset=21)
    with pytest.raises(KilnError, match=r"GroupNormalization node 'gn'.*num_groups=4"):
        relay.frontend.from_onnx(model)


@pytest.mark.parametrize("equation, shapes", [
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),   # attention scores
    ("...ij,...jk", [(2, 3, 4), (4, 5)]),                 # implicit output, broadcast batch
    ("ii", [(4, 4)]),                                     # trace
])
def test_einsum_against_numpy(equation, shapes):
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal(s).astype("float32") for s in shapes]
    names = [f"x{i}" for i in range(len(xs))]
    y = _run(helper.make_node("Einsum", names, ["y"], equation=equation), xs, opset=12)
    np.testing.assert_allclose(y, np.einsum(equation, *xs), rtol=1e-5, atol=1e-5)


def test_einsum_bad_equation_names_the_node():
    from kiln import relay
    node = helper.make_node("Einsum", ["x"], ["y"], name="es", equation="ij,jk->ik")
    with pytest.raises(KilnError, match=r"Einsum node 'es'.*names 2 operands"):
        relay.frontend.from_onnx(_model(node, [("x", TensorProto.FLOAT, [2, 3])], opset=12))


def _ort(node, inputs, opset=17):
    ort = pytest.importorskip("onnxruntime", reason="3-D conv is checked against onnxruntime")
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, x.shape) for n, x in zip(node.input, inputs)]
    graph = helper.make_graph([node], "g", vis, [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(node.input, inputs)))[0]


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1, 1, 1]},
    {"strides": [2, 1, 2], "dilations": [2, 1, 1], "pads": [0, 1, 0, 2, 0, 1], "group": 2},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2, 2]},
])
def test_conv3d_against_onnxruntime(attrs):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 7, 6, 5)).astype("float32")
    w = rng.standard_normal((6, 4 // attrs.get("group", 1), 3, 3, 2)).astype("float32")
    b = rng.standard_normal(6).astype("float32")
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    np.testing.assert_allclose(_run(node, [x, w, b], opset=17), _ort(node, [x, w, b]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [
    {"strides": [2, 2, 1], "pads": [1, 0, 0, 0, 1, 0], "output_padding": [1, 1, 0]},
    {"dilations": [2, 1, 1], "group": 2},
])
def test_conv_transpose3d_against_onnxruntime(attrs):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 4, 3, 4, 5)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 2, 3)).astype("float32")
    b = rng.standard_normal(3 * attrs.get("group", 1)).astype("float32")
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    np.testing.assert_allclose(_run(node, [x, w, b], opset=17), _ort(node, [x, w, b]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5, 6), (1, 4, 9)])
def test_global_pool_3d_and_1d_against_onnxruntime(op, shape):
    """Video networks' AdaptiveAvgPool3d(1) exports as a 5-d GlobalAveragePool (TorchScript exporter)."""
    x = np.random.default_rng(9).standard_normal(shape).astype("float32")
    node = helper.make_node(op, ["x"], ["y"])
    np.testing.assert_allclose(_run(node, [x], opset=17), _ort(node, [x]), rtol=1e-5, atol=1e-6)
