"""Parallel dense layers of one input become one dense on CUDA (relay/transform/combine_dense.py,
run at the end of FlattenRows): a BERT or ViT layer's Q, K and V products are one kernel. The
combined graph, built for the CPU, computes what onnxruntime does (issue 37)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.target.cpu_facts import why_host_cannot_run

from test_transformer_fp16_fusion import _calls, _cuda_kernels, _transformer, assert_rewrite_matches_onnxruntime

ort = pytest.importorskip("onnxruntime")


def _rewritten(name, dtype, combine=True):
    from kiln.relay.transform.combine_dense import combine_parallel_dense
    from kiln.relay.transform.flatten_rows import flatten_rows
    from kiln.relay.transform.fuse_dense_epilogue import fuse_dense_epilogue
    from kiln.relay.transform.infer_type import infer

    model, inputs = _transformer(name)
    mod, params = relay.frontend.from_onnx(model)
    mod = relay.transform.BindParams(params)(relay.transform.InferType()(mod))
    if dtype != "float32":
        mod = relay.transform.ToMixedPrecision(dtype, accumulation_dtype="float32")(mod)
    func = flatten_rows(fuse_dense_epilogue(infer(mod["main"])))  # no target: not combined yet
    return model, inputs, combine_parallel_dense(func) if combine else func


def _denses(func):
    return [n for n in _calls(func) if n.op.name == "nn.dense"]


@pytest.mark.parametrize("name, dtype", [("bert", "float32"), pytest.param("vit", "float16", marks=pytest.mark.heavy)])
def test_q_k_v_are_one_dense_and_match_onnxruntime(name, dtype):
    why = why_host_cannot_run("llvm")
    if why:
        pytest.skip(why)
    model, inputs, func = _rewritten(name, dtype)
    _, _, plain = _rewritten(name, dtype, combine=False)
    assert len(_denses(func)) == len(_denses(plain)) - 2  # one layer: Q, K, V -> one
    widths = sorted(int(d.checked_type.shape[1]) for d in _denses(func))
    assert 3 * min(widths[:-1] or widths) in widths, widths  # the combined one is 3 hidden wide
    assert sum(1 for n in _calls(func) if n.op.name == "strided_slice") == 3
    assert_rewrite_matches_onnxruntime(func, model, inputs, dtype)


def test_cuda_build_has_one_q_k_v_kernel():
    """relay.build for CUDA (NVRTC, no GPU): one layer's dense kernels are QKV, out, FFN up and down."""
    from kiln.codegen import cuda as cg

    if not cg.have_nvrtc():
        pytest.skip("needs NVRTC: pip install -e '.[cuda]'")
    model, _ = _transformer("bert")
    kernels = _cuda_kernels(model, "float32")
    assert len([k for k in kernels if "nn_dense" in k]) == 4, kernels


def test_denses_of_other_inputs_or_epilogues_stay_apart():
    """Different inputs, or a bias add on one and a multiply on the other: nothing combined."""
    from kiln.relay.transform.combine_dense import combine_parallel_dense
    from kiln.relay.transform.infer_type import infer

    x = relay.var("x", shape=(8, 16))
    y = relay.var("y", shape=(8, 16))
    rng = np.random.default_rng(0)
    w = [relay.const(rng.standard_normal((16, 16)).astype("float32")) for _ in range(4)]
    b = relay.const(rng.standard_normal(16).astype("float32"))
    outs = [relay.add(relay.nn.dense(x, w[0]), b), relay.multiply(relay.nn.dense(x, w[1]), b),
            relay.nn.dense(y, w[2])]
    func = infer(relay.Function([x, y], relay.Tuple(outs)))
    assert len(_denses(combine_parallel_dense(func))) == 3
    outs.append(relay.add(b, relay.nn.dense(x, w[3])))  # bias on the other side: a different chain
    func = infer(relay.Function([x, y], relay.Tuple(outs)))
    assert len(_denses(combine_parallel_dense(func))) == 4
    outs.append(relay.add(relay.nn.dense(x, w[3]), b))  # now two dense + bias of x: one
    func = infer(relay.Function([x, y], relay.Tuple(outs)))
    assert len(_denses(combine_parallel_dense(func))) == 4


def test_half_norm_between_casts_becomes_one_half_norm():
    """ViT (pre-norm) in float16: each float32 layer norm (and softmax) between a cast from float16
    and one back is a float16 one (fold_norm_casts); the CUDA build has no cast kernels around them."""
    from kiln.relay.transform.combine_dense import fold_norm_casts

    _, _, func = _rewritten("vit", "float16", combine=False)
    norms = [n for n in _calls(func) if n.op.name == "nn.layer_norm"]
    folded = fold_norm_casts(func)
    half = [n for n in _calls(folded) if n.op.name == "nn.layer_norm" and str(n.checked_type.dtype) == "float16"]
    casts = lambda f: sum(1 for n in _calls(f) if n.op.name == "cast")  # noqa: E731
    assert len(half) == len(norms) - 1  # the model's last norm feeds the float32 output
    soft = [n for n in _calls(folded) if n.op.name == "nn.softmax" and str(n.checked_type.dtype) == "float16"]
    assert len(soft) == 1 and casts(folded) == casts(func) - 2 * (len(half) + len(soft))
    from kiln.codegen import cuda as cg

    if cg.have_nvrtc():
        model, _ = _transformer("vit")
        kernels = _cuda_kernels(model, "float16")
        # the input's cast is left (the softmax's folded likewise: the scores' product casts)
        assert len([k for k in kernels if k.rstrip("_0123456789").endswith("fused_cast")]) == 1, kernels


def test_gpu_layer_norm_of_halves_computes_in_float32():
    """topi.gpu.layer_norm of float16 rows (float32 gamma, beta) equals the float32 norm of the
    widened rows rounded once (the compute, on the CPU)."""
    from kiln import te, topi

    why = why_host_cannot_run("llvm")
    if why:
        pytest.skip(why)
    rows, width = 6, 96
    x = te.placeholder((rows, width), "float16", name="x")
    g = te.placeholder((width,), "float32", name="g")
    b = te.placeholder((width,), "float32", name="b")
    out = topi.gpu.layer_norm(x, g, b, -1, 1e-5)
    assert str(out.dtype) == "float16"
    f = tvm.build(te.create_schedule(out.op), [x, g, b, out], target="llvm")
    rng = np.random.default_rng(9)
    xs = (rng.standard_normal((rows, width)) * 3 + 1).astype("float16")
    gs, bs = rng.standard_normal(width).astype("float32"), rng.standard_normal(width).astype("float32")
    wide = xs.astype("float64")
    mean = wide.mean(-1, keepdims=True)
    want = (wide - mean) / np.sqrt(((wide - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * gs + bs
    o = tvm.nd.empty((rows, width), "float16")
    f(tvm.nd.array(xs), tvm.nd.array(gs), tvm.nd.array(bs), o)
    # one float16 rounding of a float32 result (float32 sums of 96 terms: far below it)
    np.testing.assert_allclose(o.numpy().astype("float64"), want, rtol=2.0 ** -10, atol=2.0 ** -14)


def test_gpu_softmax_of_halves_computes_in_float32():
    """topi.gpu.softmax of float16 rows: the float32 softmax of the widened rows rounded once."""
    from kiln import te, topi

    why = why_host_cannot_run("llvm")
    if why:
        pytest.skip(why)
    x = te.placeholder((5, 77), "float16", name="x")
    out = topi.gpu.softmax(x, -1)
    assert str(out.dtype) == "float16" and out.op.attrs["axis"] == 1
    f = tvm.build(te.create_schedule(out.op), [x, out], target="llvm")
    xs = (np.random.default_rng(10).standard_normal((5, 77)) * 4).astype("float16")
    wide = xs.astype("float64")
    e = np.exp(wide - wide.max(-1, keepdims=True))
    o = tvm.nd.empty((5, 77), "float16")
    f(tvm.nd.array(xs), o)
    np.testing.assert_allclose(o.numpy().astype("float64"), e / e.sum(-1, keepdims=True), rtol=2.0 ** -10, atol=2.0 ** -24)
