"""FuseDenseEpilogue (relay/transform/fuse_dense_epilogue.py): a transformer's feed-forward block
as exported (MatMul on 3-D activations, bias Add, GELU written out in either form) builds into a
dense kernel with bias and GELU in its epilogue and matches onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.target.cpu_facts import why_host_cannot_run

from built_models import build_onnx, kernel_names

ort = pytest.importorskip("onnxruntime")


def _gelu_nodes(x: str, y: str, form: str) -> list:
    c = lambda name: f"{y}_{name}"  # noqa: E731
    if form == "erf":  # BERT / ViT as torch.onnx.export writes it
        return [helper.make_node("Div", [x, c("sqrt2")], [c("d")]), helper.make_node("Erf", [c("d")], [c("e")]),
                helper.make_node("Add", [c("e"), c("one")], [c("a")]), helper.make_node("Mul", [x, c("a")], [c("m")]),
                helper.make_node("Mul", [c("m"), c("half")], [y])]
    # GPT-2's NewGELU: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    return [helper.make_node("Pow", [x, c("three")], [c("p")]), helper.make_node("Mul", [c("p"), c("k")], [c("pk")]),
            helper.make_node("Add", [x, c("pk")], [c("s")]), helper.make_node("Mul", [c("s"), c("r")], [c("sr")]),
            helper.make_node("Tanh", [c("sr")], [c("t")]), helper.make_node("Add", [c("t"), c("one")], [c("a")]),
            helper.make_node("Mul", [c("half"), x], [c("hx")]), helper.make_node("Mul", [c("hx"), c("a")], [y])]


def _consts(y: str) -> list:
    values = {"sqrt2": math.sqrt(2), "one": 1.0, "half": 0.5, "three": 3.0, "k": 0.044715, "r": math.sqrt(2 / math.pi)}
    return [numpy_helper.from_array(np.array(v, "float32"), f"{y}_{n}") for n, v in values.items()]


def _ffn_nodes(tag: str, x: str, y: str, form: str, rng, d: int, hidden: int):
    w1, b1 = rng.standard_normal((d, hidden)).astype("float32") * 0.2, rng.standard_normal(hidden).astype("float32")
    w2, b2 = rng.standard_normal((hidden, d)).astype("float32") * 0.2, rng.standard_normal(d).astype("float32")
    t = lambda name: f"{tag}_{name}"  # noqa: E731
    inits = [numpy_helper.from_array(a, t(n)) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    nodes = [helper.make_node("MatMul", [x, t("w1")], [t("h")]), helper.make_node("Add", [t("h"), t("b1")], [t("hb")]),
             *_gelu_nodes(t("hb"), t("g"), form),
             helper.make_node("MatMul", [t("g"), t("w2")], [t("o")]), helper.make_node("Add", [t("o"), t("b2")], [t("ob")]),
             helper.make_node("Add", [t("ob"), x], [y])]
    return nodes, inits + _consts(t("g"))


def _two_blocks(seq=24, d=32, hidden=64):
    """Two feed-forward blocks as exporters write them: BERT's erf GELU, then GPT-2's tanh GELU."""
    rng = np.random.default_rng(0)
    first, inits1 = _ffn_nodes("a", "x", "mid", "erf", rng, d, hidden)
    second, inits2 = _ffn_nodes("b", "mid", "y", "tanh", rng, d, hidden)
    graph = helper.make_graph(first + second, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])],
                              initializer=inits1 + inits2)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), \
        rng.standard_normal((1, seq, d)).astype("float32")


def test_dense_bias_gelu_is_one_kernel():
    model, x = _two_blocks()
    target = "llvm -mcpu=haswell"  # an x86 target (the pass's), runnable on every x86 CI machine
    lib = build_onnx(model, target)
    kernels = kernel_names(lib)
    assert len([k for k in kernels if "nn_dense_add_nn_gelu" in k]) == 2, kernels
    assert not any("erf" in k or "tanh" in k for k in kernels), kernels
    # per block: the block input's reshape to rows, dense+bias+GELU, dense+bias, the residual add on
    # the 3-D output; the reshapes back to 3-D and to rows between the two denses cancel
    assert len(kernels) == 8, kernels
    if why_host_cannot_run(target):
        return
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.run(x=x)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # fast erf/tanh (|error| < 2e-7) inside float32 sums of 32 and 64 terms, two blocks
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_graph_that_only_looks_like_gelu_is_left_alone():
    # 0.5 * x * (1 + erf(x / 2)): the wrong constant, so not GELU
    from kiln.relay.transform.fuse_dense_epilogue import gelu_form
    from kiln.relay.analysis import users
    from kiln.relay.transform.infer_type import infer

    x = relay.var("x", shape=(4, 8))
    e = relay.erf(relay.divide(x, relay.const(2.0)))
    y = relay.multiply(relay.multiply(x, relay.const(0.5)), relay.add(e, relay.const(1.0)))
    func = infer(relay.Function([x], y))
    assert gelu_form(func.body, users(func.body)) is None
    good = relay.multiply(relay.multiply(x, relay.const(0.5)),
                          relay.add(relay.erf(relay.divide(x, relay.const(math.sqrt(2)))), relay.const(1.0)))
    func = infer(relay.Function([x], good))
    assert gelu_form(func.body, users(func.body)) == (func.params[0], "none")


def _cuda_ffn():
    model, x = _two_blocks()
    return model, x, build_onnx(model, tvm.target.Target("cuda -arch=sm_90", host="llvm"))


def test_cuda_dense_takes_bias_and_gelu_too():
    """On CUDA the tiled float32 dense fuses the same epilogue (NVRTC compiles it without a GPU)."""
    _, _, lib = _cuda_ffn()
    kernels = kernel_names(lib)
    assert len([k for k in kernels if "nn_dense_add_nn_gelu" in k]) == 2, kernels
    # 6: FlattenRows (CUDA) puts both blocks' residual adds into their dense kernels too
    assert not any("erf" in k or "tanh" in k for k in kernels) and len(kernels) == 6, kernels
    assert len([k for k in kernels if "nn_dense_add_add" in k]) == 2, kernels


@pytest.mark.gpu
def test_cuda_dense_bias_gelu_runs():
    model, x, lib = _cuda_ffn()
    gm = graph_executor.GraphModule(lib["default"](tvm.cuda(0)))
    gm.run(x=x)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # CUDA's erff / tanhf (a few ulp) inside float32 sums of 32 and 64 terms, two blocks
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def test_one_input_reshape_for_three_matmuls():
    """Q, K and V of a layer are three MatMuls on one 3-D tensor; each imports with its own
    reshape to rows. FuseDenseEpilogue keeps one (one copy kernel, not three); the result
    still matches onnxruntime."""
    rng = np.random.default_rng(1)
    seq, d = 16, 32
    ws = [numpy_helper.from_array(rng.standard_normal((d, d)).astype("float32"), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"p{i}"]) for i in range(3)]
    nodes += [helper.make_node("Mul", ["p0", "p1"], ["m"]), helper.make_node("Add", ["m", "p2"], ["y"])]
    graph = helper.make_graph(nodes, "qkv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])], initializer=ws)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    target = "llvm -mcpu=haswell"
    lib = build_onnx(model, target)
    kernels = kernel_names(lib)
    # the input's reshape to rows (was three) and the result's back to 3-D
    assert len([k for k in kernels if k.rstrip("0123456789_").endswith("fused_reshape")]) == 2, kernels
    if why_host_cannot_run(target):
        return
    x = rng.standard_normal((1, seq, d)).astype("float32")
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.run(x=x)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4 * d)
