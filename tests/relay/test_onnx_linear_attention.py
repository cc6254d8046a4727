"""LinearAttention (opset 27) against onnx's reference evaluator (onnxruntime lacks the op): every
update rule over a 16-step sequence, grouped query heads, a past state, and float16."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from kiln.relay.frontend.onnx.backend import KilnBackend


@pytest.mark.parametrize("rule, dtype", [("linear", "float32"), ("gated", "float32"), ("delta", "float32"),
                                         ("gated_delta", "float32"), ("gated_delta", "float16")])
def test_linear_attention_matches_the_onnx_reference(rule, dtype):
    rng = np.random.default_rng(5)
    b, t, hq, hkv, dk, dv = 2, 16, 4, 2, 8, 6
    feeds = {"q": rng.standard_normal((b, t, hq * dk)) * 0.3, "k": rng.standard_normal((b, t, hkv * dk)) * 0.3,
             "v": rng.standard_normal((b, t, hkv * dv)), "past": rng.standard_normal((b, hkv, dk, dv)) * 0.1}
    names = ["q", "k", "v", "past", "", ""]
    if rule in ("gated", "gated_delta"):
        feeds["decay"] = -np.abs(rng.standard_normal((b, t, hkv * dk))) * 0.2  # per state row
        names[4] = "decay"
    if rule in ("delta", "gated_delta"):
        feeds["beta"] = rng.uniform(0, 1, (b, t, hkv))
        names[5] = "beta"
    feeds = {n: a.astype(dtype) for n, a in feeds.items()}
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    while not names[-1]:  # optional inputs: empty names keep the slots of later ones
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "state"], q_num_heads=hq, kv_num_heads=hkv,
                            update_rule=rule)
    graph = helper.make_graph([node], "la", [helper.make_tensor_value_info(n, elem, a.shape) for n, a in feeds.items()],
                              [helper.make_tensor_value_info("y", elem, None), helper.make_tensor_value_info("state", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    want = ReferenceEvaluator(model).run(None, feeds)
    got = KilnBackend.prepare(model).run(feeds)
    # float32 sums over 16 steps of 8-term products; float16: the rounding of the inputs and outputs
    tol = 1e-5 if dtype == "float32" else 2e-3
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype("float32"), w.astype("float32"), rtol=tol, atol=tol)
