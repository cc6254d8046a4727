"""x86 kernels at transformer shapes, for several CPUs (issue 32): dense on pre-packed weights with
M = sequence length (rows the tile divides and rows it does not: ViT's 197), batch_matmul, and the
fused attention (topi.x86.attention) with each kind of mask, against numpy.

Code is compiled for each -mcpu (its tiles come from LLVM's facts of that CPU, not of this
machine), its assembly inspected for the vector width, and run where this machine can run it.
"""

import importlib

import numpy as np
import pytest

import kiln as tvm
from kiln import te, topi
from kiln.target import Target
from kiln.target.cpu_facts import cpu_facts, why_host_cannot_run

x86_dense = importlib.import_module("kiln.topi.x86.dense")
x86_attention = importlib.import_module("kiln.topi.x86.attention")

CPUS = ["haswell", "skylake-avx512", "x86-64-v2"]


def _target(cpu):
    if cpu_facts("llvm").arch != "x86_64":
        pytest.skip("x86 code: this machine is not x86-64")
    return Target(f"llvm -mcpu={cpu}")


def _check_asm(mod, target, what):
    asm = mod.get_source("asm")
    lanes = cpu_facts(target).lanes()
    assert ("zmm" in asm) == (lanes == 16), (target, what)
    assert ("ymm" in asm) == (lanes >= 8), (target, what)


def _run(mod, inputs, shape, target):
    out = tvm.nd.empty(shape)
    mod(*[tvm.nd.array(x) for x in inputs], out)
    return out.numpy()


def _dot_tol(k: int) -> dict:
    # float32 sums of k products of standard normals: error ~ k * eps * |terms|, rows of size ~sqrt(k)
    return {"rtol": 1e-5 * np.sqrt(k), "atol": 1e-5 * k}


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("mnk", [(64, 96, 48), (197, 80, 40), (21, 50, 33)], ids=["64rows", "197rows", "ragged"])
def test_dense_prepacked(cpu, mnk):
    m, n, k = mnk
    target = _target(cpu)
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((n, k)).astype("float32")
    with target:
        conf = x86_dense.config_for(m, n, k)
        assert conf["kernel"] == "gemm", conf  # M >= 16: the panel GEMM, weights pre-packed by relay.build
        nr = conf["tile_n"]
        data = te.placeholder((m, k), name="data")
        panels = te.placeholder((-(-n // nr), k, nr), name="panels")
        out = topi.x86.dense(data, panels, units=n)
        s = topi.x86.schedule_dense([out])
        mod = tvm.build(s, [data, panels, out], target=target)
    _check_asm(mod, target, "dense")
    if why_host_cannot_run(target):
        return
    got = _run(mod, [a, x86_dense.prepack_weight(w, nr)], (m, n), target)
    np.testing.assert_allclose(got, a @ w.T, **_dot_tol(k))


def _attention_case(b, m, n, d, e, key_transposed, mask_shape, rng):
    q = rng.standard_normal((b, m, d)).astype("float32")
    k = rng.standard_normal((b, d, n) if key_transposed else (b, n, d)).astype("float32")
    v = rng.standard_normal((b, n, e)).astype("float32")
    if mask_shape == "causal":
        mask = np.triu(np.full((m, n), np.finfo("float32").min, "float32"), 1)[None]
    elif mask_shape == "padding":
        mask = np.zeros((1, 1, n), "float32")
        mask[..., n * 3 // 4:] = np.finfo("float32").min
    else:
        mask = np.zeros((), "float32")
    kk = k if key_transposed else k.transpose(0, 2, 1)
    s = (q.astype(np.float64) @ kk) * 0.125 + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    return [q, k, v, mask], want


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("case", [(4, 32, 32, 16, 16, True, "padding"), (2, 16, 16, 16, 32, False, "causal"),
                                  (2, 37, 37, 8, 16, True, "none"), (1, 5, 70, 16, 24, False, "none")],
                         ids=["bert-like", "gpt2-like", "vit-like-197", "short-queries"])
def test_attention(cpu, case):
    target = _target(cpu)
    b, m, n, d, e, kt, mask_kind = case
    inputs, want = _attention_case(b, m, n, d, e, kt, mask_kind, np.random.default_rng(1))
    with target:
        ts = [te.placeholder(x.shape, name=f"in{i}") for i, x in enumerate(inputs)]
        out = topi.x86.attention(*ts, 0.125, kt, False)
        s = topi.x86.schedule_attention([out])
        mod = tvm.build(s, ts + [out], target=target)
    _check_asm(mod, target, "attention")
    if why_host_cannot_run(target):
        return
    got = _run(mod, inputs, (b, m, e), target)
    # softmax weights sum to 1: the output is a convex mix of value rows (|v| ~ 1); the scores'
    # float32 error (d terms) moves the weights by ~d * eps relatively. fast_exp: 1e-7 relative.
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * d)


@pytest.mark.parametrize("cpu, case", [("haswell", (3, 37, 29, 8, 16, "padding")),
                                       ("skylake-avx512", (3, 37, 29, 8, 16, "padding")),
                                       ("x86-64-v2", (2, 16, 16, 16, 16, "causal"))],
                         ids=["ragged-padding-avx2", "ragged-padding-avx512", "causal-sse"])
def test_attention_heads_in_rows(cpu, case):
    """heads > 0: query (M, H*D), key (N, H*D), value (N, H*E) and the output (M, H*E) keep the
    heads side by side in rows; head h reads columns h*D ... h*D + D - 1."""
    target = _target(cpu)
    h, m, n, d, e, mask_kind = case
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s).astype("float32") for s in ((m, h * d), (n, h * d), (n, h * e)))
    mask = np.zeros((1, 1, n), "float32") if mask_kind == "padding" else \
        np.triu(np.full((m, n), np.finfo("float32").min, "float32"), 1)[None]
    if mask_kind == "padding":
        mask[..., n * 2 // 3:] = np.finfo("float32").min
    split = lambda x: x.reshape(x.shape[0], h, -1).transpose(1, 0, 2).astype(np.float64)  # noqa: E731
    sc = split(q) @ split(k).transpose(0, 2, 1) * 0.125 + mask
    p = np.exp(sc - sc.max(-1, keepdims=True))
    want = ((p / p.sum(-1, keepdims=True)) @ split(v)).transpose(1, 0, 2).reshape(m, h * e)
    with target:
        ts = [te.placeholder(x.shape, name=f"in{i}") for i, x in enumerate((q, k, v, mask))]
        out = topi.x86.attention(*ts, 0.125, False, False, heads=h)
        assert tuple(int(x) for x in out.shape) == (m, h * e)
        mod = tvm.build(topi.x86.schedule_attention([out]), ts + [out], target=target)
    _check_asm(mod, target, "attention heads")
    if why_host_cannot_run(target):
        return
    got = _run(mod, [q, k, v, mask], (m, h * e), target)
    # as test_attention: a convex mix of value rows, scores of d float32 terms
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * d)


def test_attention_tiles_follow_the_target():
    """Rows per block and vector columns from the target's registers, not this machine's."""
    with Target("llvm -mcpu=haswell"):
        avx2 = x86_attention.default_config(128, 128, 64)
    with Target("llvm -mcpu=skylake-avx512"):
        avx512 = x86_attention.default_config(128, 128, 64)
    assert (avx2["tile_n"], avx2["tile_e"]) == (16, 16) and avx2["tile_m"] <= 6
    assert (avx512["tile_n"], avx512["tile_e"]) == (32, 32) and avx512["tile_m"] == 8
    with Target("llvm -mcpu=skylake-avx512"):
        assert x86_attention.default_config(197, 197, 64)["tile_m"] == 11  # 198 rows: one padded


@pytest.mark.parametrize("op", ["dense", "batch_matmul", "softmax"])
def test_float16_sums_round_once(op):
    """float16 dense, batch_matmul and softmax sum in float32 and round once: within about one
    float16 rounding of the exact result (a float16 sum of 256 terms was 10x off)."""
    from kiln import relay
    from kiln.contrib import graph_executor

    rng = np.random.default_rng(3)
    if op == "softmax":
        a = (rng.standard_normal((4, 256)) * 3).astype("float16")
        x = relay.var("a", shape=a.shape, dtype="float16")
        expr, feeds, params = relay.nn.softmax(x), {"a": a}, [x]
        s = a.astype(np.float64)
        exact = np.exp(s - s.max(-1, keepdims=True))
        exact /= exact.sum(-1, keepdims=True)
    else:
        a = rng.standard_normal((3, 16, 256) if op == "batch_matmul" else (16, 256)).astype("float16")
        b = rng.standard_normal((3, 24, 256) if op == "batch_matmul" else (24, 256)).astype("float16")
        x, y = (relay.var(n, shape=v.shape, dtype="float16") for n, v in (("a", a), ("b", b)))
        expr = relay.nn.batch_matmul(x, y) if op == "batch_matmul" else relay.nn.dense(x, y)
        feeds, params = {"a": a, "b": b}, [x, y]
        exact = a.astype(np.float64) @ np.swapaxes(b.astype(np.float64), -1, -2)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(relay.Function(params, expr), target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(**feeds)
    got = m.get_output(0).numpy().astype(np.float64)
    # one rounding to float16 (half an ulp, 2^-11 relative) plus float32 sums, at the row's scale
    scale = np.abs(exact).max(axis=-1, keepdims=True)
    assert np.all(np.abs(got - exact) <= 2.0 ** -11 * (np.abs(exact) + scale * 0.05)), np.abs(got - exact).max()
