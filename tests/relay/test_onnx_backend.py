"""kiln as an ONNX backend, checked with the node tests that ship inside the onnx package.

Selection: the float node tests of the ops issue 5 lists for the ONNX frontend
(``backend.node_tests()``; the same set bench/onnx_coverage.py reports on). Each case is imported,
compiled for llvm and run by the graph executor; its outputs must match onnx's expected outputs
at the case's tolerances.

- ``test_node_case[<name>]``: one test per case listed in onnx_node_passing.txt (the cases kiln
  passed when the list was written), so a regression fails by name.
- ``test_coverage_goal``: runs the whole selection and fails below the issue's 60% goal.

Every case is compiled and run at most once per session (``_outcome`` memoizes), so the two
kinds of test share the work.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX backend tests need the onnx package (pip install onnx)")

from kiln.relay.frontend.onnx import backend  # noqa: E402

GOAL = 0.60
PASSING_LIST = os.path.join(os.path.dirname(__file__), "onnx_node_passing.txt")


def _passing_names() -> list[str]:
    with open(PASSING_LIST) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


_SELECTION = {t.name: t for t in backend.node_tests()} if os.path.isdir(backend.node_test_dir()) else {}
_OUTCOMES: dict = {}


def _outcome(name: str):
    """None when the case passes, else the exception it raised (computed once per session)."""
    if name not in _OUTCOMES:
        try:
            backend.run_node_test(_SELECTION[name])
            _OUTCOMES[name] = None
        except Exception as e:  # noqa: BLE001 - recorded and re-raised by the test that asks
            _OUTCOMES[name] = e
    return _OUTCOMES[name]


def test_node_test_data_present():
    # onnx 1.23 stopped shipping the node test data (pyproject pins onnx below it); without the
    # data every case below would be missing, which must fail, not pass vacuously.
    assert _SELECTION, f"no ONNX node test data under {backend.node_test_dir()}; install onnx<1.23"


@pytest.mark.parametrize("name", _passing_names())
def test_node_case(name):
    assert name in _SELECTION, (f"{name} is listed in onnx_node_passing.txt but is not in the selection "
                                "(renamed in onnx?); regenerate with python bench/onnx_coverage.py --write-passing")
    err = _outcome(name)
    if err is not None:
        raise err


def test_coverage_goal():
    outcomes = {name: _outcome(name) for name in _SELECTION}
    failed = sorted(n for n, e in outcomes.items() if e is not None)
    rate = 1 - len(failed) / len(outcomes)
    assert rate >= GOAL, (f"ONNX node-test pass rate {rate:.1%} ({len(outcomes) - len(failed)}/{len(outcomes)}) "
                          f"is below the goal {GOAL:.0%}; failing: {failed}")


# -- the backend API itself ----------------------------------------------------------------------

def _model(nodes, inputs, outputs, initializers=(), opset=17):
    from onnx import helper
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, dtype, shape):
    from onnx import helper
    return helper.make_tensor_value_info(name, dtype, shape)


def test_prepare_run_list_and_dict():
    from onnx import TensorProto, helper
    model = _model([helper.make_node("Add", ["a", "b"], ["c"])],
                   [_vi("a", TensorProto.FLOAT, [2, 3]), _vi("b", TensorProto.FLOAT, [2, 3])],
                   [_vi("c", TensorProto.FLOAT, [2, 3])])
    rep = backend.KilnBackend.prepare(model, "CPU")
    a, b = np.ones((2, 3), "float32"), np.arange(6, dtype="float32").reshape(2, 3)
    np.testing.assert_allclose(rep.run([a, b])[0], a + b)
    np.testing.assert_allclose(rep.run({"a": b, "b": b}).c, b + b)


def test_shape_argument_inputs_compile_per_value():
    from onnx import TensorProto, helper
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, [2, 6]), _vi("shape", TensorProto.INT64, [2])],
                   [_vi("y", TensorProto.FLOAT, None)])
    assert backend.shape_argument_inputs(model) == ["shape"]
    rep = backend.KilnBackend.prepare(model)
    x = np.arange(12, dtype="float32").reshape(2, 6)
    assert rep.run([x, np.array([3, 4])])[0].shape == (3, 4)
    assert rep.run([x, np.array([4, -1])])[0].shape == (4, 3)
    assert len(rep._executors) == 2


def test_symbolic_input_dims_take_the_run_shape():
    from onnx import TensorProto, helper
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, ["n", 3])],
                   [_vi("y", TensorProto.FLOAT, ["n", 3])])
    x = np.array([[-1, 2, -3], [4, -5, 6]], "float32")
    np.testing.assert_allclose(backend.KilnBackend.run_model(model, [x])[0], np.maximum(x, 0))


def test_run_node():
    from onnx import helper
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    x = np.random.default_rng(0).standard_normal((3, 5)).astype("float32")
    (y,) = backend.KilnBackend.run_node(node, [x], opset_version=13)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_devices():
    assert backend.KilnBackend.supports_device("CPU")
    assert not backend.KilnBackend.supports_device("CUDA")
    with pytest.raises(backend.BackendError, match="device 'CUDA' is not supported"):
        backend.KilnBackend.prepare(_model([], [], []), "CUDA")


def test_wrong_input_count_names_the_inputs():
    from onnx import TensorProto, helper
    model = _model([helper.make_node("Neg", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [2])],
                   [_vi("y", TensorProto.FLOAT, [2])])
    with pytest.raises(backend.BackendError, match=r"takes 1 inputs \['x'\], got 2"):
        backend.KilnBackend.prepare(model).run([np.zeros(2, "float32")] * 2)
