"""nn.hardswish (relay/op/activation.py, formed by FuseDenseEpilogue): MobileNetV3's hardswish,
written as exporters write it (ONNX HardSwish, x * HardSigmoid(x), x * Clip(x + 3, 0, 6) / 6),
builds into the conv kernel's epilogue and matches onnxruntime."""

from __future__ import annotations


import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.target.cpu_facts import why_host_cannot_run

from built_models import build_onnx, kernel_names

ort = pytest.importorskip("onnxruntime")


def _hardswish_nodes(x: str, y: str, form: str) -> list:
    c = lambda name: f"{y}_{name}"  # noqa: E731
    if form == "op":
        return [helper.make_node("HardSwish", [x], [y])]
    if form == "hardsigmoid":
        return [helper.make_node("HardSigmoid", [x], [c("s")], alpha=1 / 6, beta=0.5),
                helper.make_node("Mul", [x, c("s")], [y])]
    # torch's x * relu6(x + 3) / 6, as the TorchScript exporter writes hardswish written by hand
    return [helper.make_node("Add", [x, c("three")], [c("a")]), helper.make_node("Clip", [c("a"), c("zero"), c("six")], [c("r")]),
            helper.make_node("Mul", [x, c("r")], [c("m")]), helper.make_node("Div", [c("m"), c("six")], [y])]


def _model(forms=("op", "hardsigmoid", "relu6")):
    rng = np.random.default_rng(0)
    nodes, inits, cin = [], [], 8
    for i, form in enumerate(forms):
        w = rng.standard_normal((16, cin, 3, 3)).astype("float32") * 0.5
        b = rng.standard_normal(16).astype("float32")
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        inits += [numpy_helper.from_array(np.array(v, "float32"), f"h{i}_{n}") for n, v in
                  (("three", 3.0), ("zero", 0.0), ("six", 6.0))]
        src = "x" if i == 0 else f"h{i - 1}"
        nodes += [helper.make_node("Conv", [src, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  *_hardswish_nodes(f"c{i}", f"h{i}", form)]
        cin = 16
    graph = helper.make_graph(nodes, "hs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info(f"h{len(forms) - 1}", TensorProto.FLOAT, [1, 16, 12, 12])],
                              initializer=inits)
    # values across hardswish's kinks at -3 and 3
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), \
        rng.standard_normal((1, 8, 12, 12)).astype("float32")


def test_conv_hardswish_is_one_kernel():
    model, x = _model()
    target = "llvm -mcpu=haswell"  # an x86 target (the pass's), runnable on every x86 CI machine
    lib = build_onnx(model, target)
    kernels = kernel_names(lib)
    assert len([k for k in kernels if "conv2d" in k and "hardswish" in k]) == 3, kernels
    assert not any("clip" in k or "multiply" in k or "divide" in k for k in kernels), kernels
    if why_host_cannot_run(target):
        return
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.run(x=x)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(want).max() > 3.0 and (want == 0).any()  # both kinks reached
    # float32 sums of 72 and 144 products, three layers
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_graph_that_only_looks_like_hardswish_is_left_alone():
    from kiln.relay.analysis import users
    from kiln.relay.op import tensor
    from kiln.relay.transform.fuse_dense_epilogue import hardswish_form
    from kiln.relay.transform.infer_type import infer

    x = relay.var("x", shape=(4, 4), dtype="float32")
    for k in (1 / 6, 1 / 5):  # x * clip(x * k + 0.5, 0, 1): hardswish for k = 1/6 only
        body = tensor.multiply(x, tensor.clip(tensor.add(tensor.multiply(x, relay.const(np.float32(k))),
                                                         relay.const(np.float32(0.5))), 0.0, 1.0))
        f = infer(relay.Function([x], body))
        found = hardswish_form(f.body, users(f.body))
        assert (found is x) == (k == 1 / 6), k
