"""from_onnx on whole models vs onnxruntime (rtol/atol 1e-4), plus importer error handling."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_models import bert_block, mobilenet_v2, resnet18, run_ort, single_node

import kiln as tvm
from kiln import relay
from kiln.relay import reference
from kiln.relay import transform as T


def _check(model, inputs, optimize=False, **kwargs):
    mod, params = relay.frontend.from_onnx(model, **kwargs)
    if optimize:
        mod = T.BindParams(params)(mod)
        params = {}
        with tvm.transform.PassContext(opt_level=3):
            mod = T.Sequential([T.ConvertLayout({"nn.conv2d": ["NHWC", "default"]}), T.optimize_sequence()])(mod)
    got = reference.run(mod, inputs, params)
    want = run_ort(model, inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return mod


def test_resnet18_matches_onnxruntime():
    model, inputs = resnet18(image=224)
    mod = _check(model, inputs)
    assert mod["main"].checked_type.ret_type == relay.TensorType((1, 1000), "float32")


def test_resnet18_optimized_nhwc_matches_onnxruntime():
    model, inputs = resnet18(image=64)
    _check(model, inputs, optimize=True)


def test_mobilenet_v2_matches_onnxruntime():
    model, inputs = mobilenet_v2(image=224)
    _check(model, inputs)
    small, small_inputs = mobilenet_v2(image=64)
    _check(small, small_inputs, optimize=True)


def test_bert_block_matches_onnxruntime():
    model, inputs = bert_block()
    mod = _check(model, inputs)
    # Shape -> Gather -> Concat was folded at import: no shape ops reach relay
    assert "meta[relay.Constant]" in mod["main"].astext()
    _check(model, inputs, optimize=True)


def test_params_kept_unfrozen():
    model, inputs = bert_block()
    mod, params = relay.frontend.from_onnx(model, freeze_params=False)
    assert params and all(isinstance(v, np.ndarray) for v in params.values())
    assert {p.name_hint for p in mod["main"].params} == {"input", *params}
    np.testing.assert_allclose(reference.run(mod, inputs, params), run_ort(model, inputs)[0], rtol=1e-4, atol=1e-4)


def test_unsupported_ops_are_listed_once_with_node_names():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("Bernoulli", ["a"], ["b"], name="hm1"),
             helper.make_node("Bernoulli", ["b"], ["c"], name="hm2"),
             helper.make_node("RandomUniformLike", ["c"], ["y"], name="det")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(tvm.KilnError) as err:
        relay.frontend.from_onnx(model)
    msg = str(err.value)
    assert "2 unsupported op type(s)" in msg and "opset 13" in msg
    assert "RandomUniformLike: det" in msg and "Bernoulli: hm1, hm2" in msg and "docs/relay.md" in msg


def test_dynamic_dims_need_a_shape():
    model = single_node("Relu", {"x": np.zeros((1, 4), "float32")})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(tvm.KilnError, match=r"dynamic axes kiln must know: 'x' axis 0 \(batch\)\. Pass shape="):
        relay.frontend.from_onnx(model)
    mod, _ = relay.frontend.from_onnx(model, shape={"x": (3, 4)})
    assert mod["main"].params[0].type_annotation.shape == (3, 4)


def test_model_path_and_opset_check(tmp_path):
    model = single_node("Relu", {"x": np.zeros((2,), "float32")}, opset=6)
    with pytest.raises(tvm.KilnError, match="opset 6 is not supported; kiln imports opset 7 and newer"):
        relay.frontend.from_onnx(model)
    model = single_node("Relu", {"x": np.zeros((2,), "float32")})
    onnx.save(model, tmp_path / "m.onnx")
    mod, _ = relay.frontend.from_onnx(str(tmp_path / "m.onnx"))
    assert mod["main"].body.op.name == "nn.relu"
