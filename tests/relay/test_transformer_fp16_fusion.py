"""Transformer blocks after ToMixedPrecision("float16"/"bfloat16") fuse as their float32 graphs do
(issue 37): the GELU that ToMixedPrecision wraps in casts (erf and tanh stay float32) is still
recognised, so it lands in the dense kernel's epilogue."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.target.cpu_facts import why_host_cannot_run

from built_models import kernel_names
from test_onnx_dense_epilogue import _two_blocks

ort = pytest.importorskip("onnxruntime")


def _build(model, target, dtype):
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3):
        mod = relay.transform.ToMixedPrecision(dtype, accumulation_dtype="float32")(relay.transform.InferType()(mod))
        return relay.build(mod, target=target, params=params)


def _cosine(got, want) -> float:
    got, want = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    return float(np.dot(got, want) / (np.linalg.norm(got) * np.linalg.norm(want)))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mixed_precision_gelu_fuses_into_the_dense(dtype):
    """Both GELU forms (BERT's erf, GPT-2's tanh) of the half-precision graph, built for CUDA
    (NVRTC, no GPU needed): one dense + bias + GELU kernel each, as in float32."""
    model, _ = _two_blocks()
    kernels = kernel_names(_build(model, tvm.target.Target("cuda -arch=sm_90", host="llvm"), dtype))
    assert len([k for k in kernels if "nn_dense" in k and "nn_gelu" in k]) == 2, kernels
    assert not any("erf" in k or "tanh" in k for k in kernels), kernels


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mixed_precision_gelu_matches_onnxruntime(dtype):
    why = why_host_cannot_run("llvm")
    if why:
        pytest.skip(why)
    model, x = _two_blocks()
    lib = _build(model, "llvm", dtype)
    assert len([k for k in kernel_names(lib) if "nn_gelu" in k]) == 2, kernel_names(lib)
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.run(x=x)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = gm.get_output(0).numpy()
    # half-precision inputs and weights (8 / 11 significant bits), float32 sums: the bound
    assert _cosine(got, want) >= 0.999
    assert np.abs(got - want).max() <= (3e-2 if dtype == "bfloat16" else 5e-3) * np.abs(want).max()


# -- FlattenRows (relay/transform/flatten_rows.py) --------------------------------------------------
DATA = "tests/relay/data/transformers"


def _transformer(name):
    import onnx

    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    return onnx.load(str(root / DATA / f"{name}.onnx")), dict(np.load(root / DATA / f"{name}_inputs.npz"))


def _cuda_kernels(model, dtype, disabled=()):
    mod, params = relay.frontend.from_onnx(model)
    with tvm.transform.PassContext(opt_level=3, disabled_pass=list(disabled)):
        if dtype != "float32":
            mod = relay.transform.ToMixedPrecision(dtype, accumulation_dtype="float32")(relay.transform.InferType()(mod))
        lib = relay.build(mod, target=tvm.target.Target("cuda -arch=sm_90", host="llvm"), params=params)
    return kernel_names(lib)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cuda_transformer_has_no_reshape_kernels_between_norms_and_denses(dtype):
    """One BERT layer for CUDA (NVRTC, no GPU): the layer norms and the softmax read and write the
    rows the dense layers use, so no kernel only reshapes (or reshapes and casts) what goes
    between them, and both residual adds are in their dense kernels' epilogues."""
    model, _ = _transformer("bert")
    before = _cuda_kernels(model, dtype, disabled=["FlattenRows"])
    after = _cuda_kernels(model, dtype)
    alone = lambda ks: [k for k in ks if k.rstrip("_0123456789").endswith(("fused_reshape", "fused_reshape_cast"))]  # noqa: E731
    # one is left: the model's output norm keeps the 3-D shape of its output
    assert len(alone(after)) <= 1 and len(alone(before)) >= 3, (before, after)
    assert len([k for k in after if "nn_dense" in k and k.rstrip("_0123456789").endswith("add_add")
                or "nn_dense" in k and "add_add_cast" in k]) == 2, after
    # the scores' scale and mask in the batch_matmul's epilogue (its (H, S, S) output was reshaped
    # to (1, H, S, S) before them)
    assert any("nn_batch_matmul" in k and "multiply_add" in k for k in after), after
    assert len(after) <= len(before) - 4, (before, after)


@pytest.mark.parametrize("name, dtype", [("bert", "float32"), ("gpt2", "float16"),
                                         pytest.param("vit", "float32", marks=pytest.mark.heavy)])
def test_flatten_rows_matches_onnxruntime(name, dtype):
    """The rewritten graph (FlattenRows runs on CUDA only: applied here by hand, then built for the
    CPU) computes what onnxruntime does: the rewrites only move reshapes and casts."""
    from kiln.relay.transform.flatten_rows import flatten_rows
    from kiln.relay.transform.fuse_dense_epilogue import fuse_dense_epilogue
    from kiln.relay.transform.infer_type import infer

    why = why_host_cannot_run("llvm")
    if why:
        pytest.skip(why)
    model, inputs = _transformer(name)
    mod, params = relay.frontend.from_onnx(model)
    mod = relay.transform.BindParams(params)(relay.transform.InferType()(mod))
    if dtype != "float32":
        mod = relay.transform.ToMixedPrecision(dtype, accumulation_dtype="float32")(mod)
    func = flatten_rows(fuse_dense_epilogue(infer(mod["main"])))
    reshapes = lambda f: sum(1 for n in _calls(f) if n.op.name == "reshape")  # noqa: E731
    assert reshapes(func) < reshapes(infer(mod["main"]))
    assert_rewrite_matches_onnxruntime(func, model, inputs, dtype)


def assert_rewrite_matches_onnxruntime(func, model, inputs, dtype):
    """A rewritten one-layer transformer graph, built for the CPU, against onnxruntime on the ONNX
    model it came from: float32 to 1e-4 (sums of at most 64 terms), half precision by cosine and
    the largest error relative to the output's."""
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(tvm.IRModule.from_expr(func), target="llvm")
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    gm.set_input(**inputs)
    gm.run()
    got = gm.get_output(0).numpy()
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    if dtype == "float32":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    else:
        assert _cosine(got, want) >= 0.999
        assert np.abs(got - want).max() <= 5e-3 * np.abs(want).max()


def _calls(func):
    from kiln.relay.expr import Call
    from kiln.relay.op.registry import OpDef
    from kiln.relay.visitor import post_order

    return [n for n in post_order(func.body) if isinstance(n, Call) and isinstance(n.op, OpDef)]
