"""Fused attention on GPUs (topi/cuda/attention.py, relay nn.attention on CUDA): the kernel against
float64 numpy through the OpenCL runner (PoCL in CI: the schedule is plain GPU code, no tensor
cores), the relay op built for OpenCL and run there, FuseAttention forming it for CUDA targets
when asked (one kernel, NVRTC accepts it), and on the GPU against numpy."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.topi.cuda import attention as A

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from gpu_runner import run  # noqa: E402


def reference(q, k, v, mask, scale, key_transposed, value_transposed):
    k = k if key_transposed else k.transpose(0, 2, 1)
    v = v.transpose(0, 2, 1) if value_transposed else v
    s = np.matmul(q.astype(np.float64), k.astype(np.float64)) * scale + np.asarray(mask, np.float64)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v.astype(np.float64)


def _inputs(rng, b, m, n, d, e, mask_shape, key_transposed, value_transposed):
    q = rng.standard_normal((b, m, d)).astype("float32")
    k = rng.standard_normal((b, d, n) if key_transposed else (b, n, d)).astype("float32")
    v = rng.standard_normal((b, e, n) if value_transposed else (b, n, e)).astype("float32")
    mask = rng.standard_normal(mask_shape).astype("float32") if mask_shape else np.zeros((), "float32")
    return q, k, v, mask


@pytest.mark.parametrize("b,m,n,d,e,mask_shape,kt,vt", [
    (3, 21, 37, 16, 24, (1, 21, 37), True, False),   # ragged rows and keys, a mask per query row (GPT-2's)
    (2, 16, 32, 8, 8, (1, 1, 32), False, True),       # one mask row for all (BERT's padding mask)
    (2, 33, 20, 8, 16, None, True, False),            # no mask (ViT)
], ids=["causal-like", "padding-mask", "no-mask"])
def test_kernel_matches_numpy_on_opencl(b, m, n, d, e, mask_shape, kt, vt):
    rng = np.random.default_rng(0)
    q, k, v, mask = _inputs(rng, b, m, n, d, e, mask_shape, kt, vt)
    got = run("opencl", lambda *x: A.attention(*x, 0.25, kt, vt), A.schedule_attention, [q, k, v, mask])
    # float32 sums of at most max(d, n) terms of order 1, a softmax of values of order 1
    np.testing.assert_allclose(got, reference(q, k, v, mask, 0.25, kt, vt), rtol=1e-5, atol=1e-5)


def test_half_precision_kernel_matches_numpy_on_opencl():
    """float16 query/key/value/mask: float32 sums inside, one rounding of each output to half."""
    rng = np.random.default_rng(0)
    q, k, v, mask = (x.astype("float16") for x in _inputs(rng, 3, 21, 37, 16, 24, (1, 21, 37), True, False))
    got = run("opencl", lambda *x: A.attention(*x, 0.25, True, False), A.schedule_attention, [q, k, v, mask])
    assert got.dtype == np.float16
    # the reference takes the same half inputs: what is left is the output's rounding (half an
    # ulp, 2^-11 relative) over float32 sums of at most 37 terms
    np.testing.assert_allclose(got.astype(np.float64), reference(q, k, v, mask, 0.25, True, False),
                               rtol=2.0 ** -10, atol=1e-4)


def _relay_attention(b, m, n, d, e):
    q, kt, v = (relay.var(x, shape=s) for x, s in (("q", (b, m, d)), ("k", (b, d, n)), ("v", (b, n, e))))
    mask = relay.var("mask", shape=(1, 1, n))
    out = relay.nn.attention(q, kt, v, mask, scale=0.125, key_transposed=True)
    return tvm.IRModule.from_expr(relay.Function([q, kt, v, mask], out))


def _run_relay(mod, target, dev, inputs):
    from kiln.contrib import graph_executor

    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=tvm.target.Target(target, host="llvm"))
    g = graph_executor.GraphModule(lib["default"](dev))
    g.set_input(**inputs)
    g.run()
    return g.get_output(0).numpy(), lib


def test_relay_op_runs_on_opencl():
    rng = np.random.default_rng(1)
    q, k, v, _ = _inputs(rng, 4, 24, 40, 16, 16, None, True, False)
    mask = rng.standard_normal((1, 1, 40)).astype("float32")
    got, _ = _run_relay(_relay_attention(4, 24, 40, 16, 16), "opencl", tvm.cl(0), {"q": q, "k": k, "v": v, "mask": mask})
    np.testing.assert_allclose(got, reference(q, k, v, mask, 0.125, True, False), rtol=1e-5, atol=1e-5)


def test_fuse_attention_forms_one_cuda_kernel_when_asked():
    """batch_matmul -> scale -> softmax -> batch_matmul on a CUDA target with the PassContext
    config relay.FuseAttention.cuda: one nn.attention kernel, compiled by NVRTC; without it (the
    default: slower than the chain on the H200 so far) the chain stays."""
    from kiln.codegen import cuda as cg

    if not cg.have_nvrtc():
        pytest.skip("needs NVRTC: pip install -e '.[cuda]'")
    q = relay.var("q", shape=(12, 128, 64))
    kt = relay.var("k", shape=(12, 64, 128))
    v = relay.var("v", shape=(12, 128, 64))
    s = relay.multiply(relay.nn.batch_matmul(q, kt, transpose_b=False), relay.const(0.125))
    p = relay.nn.softmax(s)
    mod = tvm.IRModule.from_expr(relay.Function([q, kt, v], relay.nn.batch_matmul(p, v, transpose_b=False)))
    for fused in (True, False):
        with tvm.transform.PassContext(opt_level=3, config={"relay.FuseAttention.cuda": fused}):
            lib = relay.build(mod, target=tvm.target.Target("cuda -arch=sm_90", host="llvm"))
        code = lib.get_lib().metadata["device_code"]
        names = [k["name"] for k in code["kernels"]]
        if fused:
            assert len(names) == 1 and "attention" in names[0], names
            assert "cubin" in code
        else:
            assert len(names) > 1 and not any("attention" in n for n in names), names


@pytest.mark.gpu
def test_relay_op_runs_on_cuda():
    dev = tvm.cuda(0)
    rng = np.random.default_rng(2)
    q, k, v, _ = _inputs(rng, 12, 128, 128, 64, 64, None, True, False)
    mask = np.where(rng.random((1, 1, 128)) < 0.25, -1e4, 0).astype("float32")  # BERT's padding mask
    got, _ = _run_relay(_relay_attention(12, 128, 128, 64, 64), "cuda", dev, {"q": q, "k": k, "v": v, "mask": mask})
    np.testing.assert_allclose(got, reference(q, k, v, mask, 0.125, True, False), rtol=1e-5, atol=1e-5)
