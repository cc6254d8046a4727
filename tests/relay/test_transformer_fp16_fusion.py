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
