"""ai.onnx.preview FlexAttention against onnx's reference evaluator: grouped heads, a score_mod
graph (soft cap and a causal mask built from Shape/Range inside it), a prob_mod graph, float16."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from kiln.relay.frontend.onnx.backend import KilnBackend


def _score_mod(elem):
    """tanh soft cap at 5, then keys after the query masked out."""
    consts = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
              (("cap", 5.0, "float32"), ("zero", 0, "int64"), ("one", 1, "int64"), ("i2", 2, "int64"),
               ("i3", 3, "int64"), ("qs", [1, 1, -1, 1], "int64"), ("ks", [1, 1, 1, -1], "int64"),
               ("ninf", -np.inf, "float32"))]
    nodes = [helper.make_node("Div", ["s", "cap"], ["a"]), helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Mul", ["t", "cap"], ["c"]), helper.make_node("Shape", ["s"], ["sh"]),
             helper.make_node("Gather", ["sh", "i2"], ["L"], axis=0), helper.make_node("Gather", ["sh", "i3"], ["S"], axis=0),
             helper.make_node("Range", ["zero", "L", "one"], ["qr"]), helper.make_node("Range", ["zero", "S", "one"], ["kr"]),
             helper.make_node("Reshape", ["qr", "qs"], ["qi"]), helper.make_node("Reshape", ["kr", "ks"], ["ki"]),
             helper.make_node("GreaterOrEqual", ["qi", "ki"], ["m"]), helper.make_node("Where", ["m", "c", "ninf"], ["o"])]
    return helper.make_graph(nodes, "score_mod", [helper.make_tensor_value_info("s", elem, None)],
                             [helper.make_tensor_value_info("o", elem, None)], initializer=consts)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_flex_attention_with_graph_mods_matches_the_onnx_reference(dtype):
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 4, 6, 8)).astype(dtype)
    k, v = (rng.standard_normal((2, 2, 6, 8)).astype(dtype) for _ in range(2))
    prob = helper.make_graph([helper.make_node("Mul", ["p", "h"], ["o"])], "prob_mod",
                             [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
                             initializer=[numpy_helper.from_array(np.array(0.5, "float32"), "h")])
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                            score_mod=_score_mod(TensorProto.FLOAT), prob_mod=prob)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([node], "flex", [helper.make_tensor_value_info(n, elem, a.shape) for n, a in
                                               (("q", q), ("k", k), ("v", v))], [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    feeds = {"q": q, "k": k, "v": v}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    (got,) = KilnBackend.prepare(model).run(feeds)
    tol = 1e-5 if dtype == "float32" else 2e-3  # float16: rounding of the scaled inputs and the output
    np.testing.assert_allclose(got.astype("float32"), want.astype("float32"), rtol=tol, atol=tol)
