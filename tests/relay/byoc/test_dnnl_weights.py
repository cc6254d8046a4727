"""Changing an offloaded layer's weight after the build reaches oneDNN: ``set_input`` of the
function's constant (``constant_params``), of a weight left as a graph input, and ``load_params``,
each checked against onnxruntime run with the new weights."""

import os
import sys

import numpy as np
import pytest
from onnx import helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.backend.contrib import constant_params
from kiln.relay.op.contrib.dnnl import partition_for_dnnl
from kiln.runtime.json_runtime import dnnl_available

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from onnx_models import run_ort  # noqa: E402

MISSING = dnnl_available()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"needs oneDNN: {MISSING}")
TOL = dict(rtol=1e-4, atol=1e-4)


def _model(weights: dict):
    """Conv(3x3, bias) -> Relu -> Conv(1x1) -> GlobalAveragePool -> Flatten -> Gemm."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "weights", [helper.make_tensor_value_info("x", 1, (1, 4, 8, 8))],
                              [helper.make_tensor_value_info("y", 1, (1, 5))],
                              initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _weights(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {"w1": (8, 4, 3, 3), "b1": (8,), "w2": (6, 8, 1, 1), "w3": (5, 6)}
    return {k: (rng.standard_normal(s) * 0.3).astype("float32") for k, s in shapes.items()}


X = {"x": np.random.default_rng(9).standard_normal((1, 4, 8, 8)).astype("float32")}


def _run(m):
    m.set_input(**X)
    m.run()
    return m.get_output(0).numpy()


def _build(bind: bool):
    old = _weights(0)
    mod, params = relay.frontend.from_onnx(_model(old), shape={"x": (1, 4, 8, 8)}, freeze_params=False)
    part = partition_for_dnnl(mod, params if bind else None)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(part, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    if not bind:
        for k, v in params.items():
            m.set_input(k, v)
    return lib, m, old


def test_set_input_of_an_offloaded_constant_reaches_onednn():
    lib, m, old = _build(bind=True)
    np.testing.assert_allclose(_run(m), run_ort(_model(old), X)[0], **TOL)  # oneDNN reorders w1, w2 here
    names = constant_params(lib)
    by_shape = {tuple(lib.get_params()[p].shape): p for p in names.values()}
    assert (8, 4, 3, 3) in by_shape and (6, 8, 1, 1) in by_shape and (5, 6) in by_shape
    new = _weights(1)
    new["b1"] = old["b1"]
    for key in ("w1", "w2", "w3"):
        m.set_input(by_shape[new[key].shape], new[key])
    np.testing.assert_allclose(_run(m), run_ort(_model(new), X)[0], **TOL)


def test_load_params_refreshes_onednn_weights():
    lib, m, old = _build(bind=True)
    _run(m)
    params = {k: v.numpy() for k, v in lib.get_params().items()}
    w1 = next(p for p in constant_params(lib).values() if params[p].shape == (8, 4, 3, 3))
    params[w1] = -params[w1]
    m.load_params(relay.save_param_dict(params))
    flipped = dict(old, w1=-old["w1"])
    np.testing.assert_allclose(_run(m), run_ort(_model(flipped), X)[0], **TOL)


def test_weights_left_as_graph_inputs_follow_set_input():
    lib, m, old = _build(bind=False)  # weights are inputs of the offloaded functions, not constants
    assert any(n["attrs"].get("compiler") == "dnnl" for n in __import__("json").loads(lib.get_graph_json())["nodes"]
               if n["op"] == "tvm_op")
    np.testing.assert_allclose(_run(m), run_ort(_model(old), X)[0], **TOL)
    new = _weights(2)
    for k, v in new.items():
        m.set_input(k, v)
    np.testing.assert_allclose(_run(m), run_ort(_model(new), X)[0], **TOL)


def test_constant_params_names_every_offloaded_constant():
    lib, _, _ = _build(bind=True)
    names = constant_params(lib)
    symbols = {m.symbol: m for m in lib.get_lib().imported_modules if m.type_key == "dnnl"}
    want = [c["name"] for m in symbols.values() for c in m.graph["constants"]]
    assert sorted(names) == sorted(want) and len(want) >= 3
    assert set(names.values()) <= set(lib.get_params())
    for m in symbols.values():
        for c in m.graph["constants"]:
            assert list(lib.get_params()[names[c["name"]]].shape) == c["shape"]
