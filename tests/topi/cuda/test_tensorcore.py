"""Tensor cores (wmma) for CUDA: tensorized dense / batch_matmul compile to PTX with wmma
instructions everywhere NVRTC is installed (no GPU needed); the gpu-marked tests run them
against numpy."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.codegen import cuda as cg
from kiln.errors import CompileError, ScheduleError
from kiln.topi.cuda import (
    batch_matmul_tensorcore, conv2d_nhwc_tensorcore, dense_tensorcore, intrin_wmma_gemm, schedule_conv2d_nhwc_tensorcore,
    schedule_dense_tensorcore,
)
from kiln.topi.cuda.tensorcore import _find as tc_find, fits

pytestmark = pytest.mark.skipif(not cg.have_nvrtc(),
                                reason="needs NVRTC: pip install -e '.[cuda]' (cuda-bindings, nvidia-cuda-nvrtc)")

TARGET = "cuda -arch=sm_80"


def build_dense(M, N, K, out_dtype="float32", cfg=None, bias=False, target=TARGET):
    A = te.placeholder((M, K), "float16", name="A")
    W = te.placeholder((N, K), "float16", name="W")
    b = te.placeholder((N,), out_dtype, name="bias") if bias else None
    C = dense_tensorcore(A, W, b, out_dtype=out_dtype, cfg=cfg)
    s = schedule_dense_tensorcore([C])
    args = [A, W] + ([b] if bias else []) + [C]
    return tvm.build(s, args, target=target, name="dense_tc")


def build_batch_matmul(Bn, M, N, K, out_dtype="float32", target=TARGET):
    A = te.placeholder((Bn, M, K), "float16", name="A")
    B = te.placeholder((Bn, N, K), "float16", name="B")
    C = batch_matmul_tensorcore(A, B, out_dtype=out_dtype)
    s = schedule_dense_tensorcore([C])
    return tvm.build(s, [A, B, C], target=target, name="bmm_tc")


def device(f):
    (dev,) = [m for m in f.imported_modules if m.type_key == "cuda"]
    return dev.get_source(), dev.get_source("ptx")


@pytest.mark.parametrize("out_dtype,ptx_types", [("float32", "f32.f32"), ("float16", "f16.f16")])
def test_dense_compiles_to_wmma(out_dtype, ptx_types):
    src, ptx = device(build_dense(128, 64, 96, out_dtype, cfg={"double_buffer": 0}))
    assert "kiln_frag_ab" in src and "wmma.matrix" not in src  # fragments, not buffers
    assert f"wmma.mma.sync.aligned.row.col.m16n16k16.{ptx_types}" in ptx
    assert "wmma.load.a.sync.aligned.row.m16n16k16.shared.f16" in ptx  # from shared: LDSM-able
    assert "wmma.load.b.sync.aligned.col.m16n16k16.shared.f16" in ptx
    assert f"wmma.store.d.sync.aligned.row.m16n16k16.{ptx_types[:3]}" in ptx
    assert "bar.sync" in ptx  # the shared tiles are fenced between fetch and wmma loads
    assert "*((uint4*)(A_shared + " in src  # 8 halves per fetch, one 128-bit load and store
    assert cg.compile_source(src, "sm_80", "cubin")  # ptxas accepts the inline wmma PTX too
    assert "ld.global.nc.v4.u32" in ptx


@pytest.mark.parametrize("out_dtype,ptx_type", [("float32", "f32"), ("float16", "f16")])
def test_mma_knob_uses_ldmatrix_and_mma_sync(out_dtype, ptx_type):
    src, ptx = device(build_dense(128, 128, 256, out_dtype, cfg={"mma": 1, "double_buffer": 2, "chunk": 2}))
    assert f"mma.sync.aligned.m16n8k16.row.col.{ptx_type}.f16.f16.{ptx_type}" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx and "wmma." not in ptx
    assert cg.compile_source(src, "sm_90", "cubin")
    _, ptx75 = device(build_dense(128, 128, 256, out_dtype, cfg={"mma": 1}, target="cuda -arch=sm_75"))
    assert "wmma.mma.sync" in ptx75 and "mma.sync.aligned.m16n8k16" not in ptx75  # needs sm_80: wmma


def test_raster_knob_walks_block_rows_on_one_grid_axis():
    src, ptx = device(build_dense(512, 256, 128, cfg={"raster": 2}))
    assert "blockIdx.y" not in src and "wmma.mma.sync" in ptx


def test_dense_knobs_change_the_kernel():
    cfg = {"block_row_warps": 1, "block_col_warps": 2, "warp_row_tiles": 2, "warp_col_tiles": 1,
           "chunk": 1, "offset": 0, "vec": 4}
    src, ptx = device(build_dense(64, 64, 64, cfg=cfg))
    assert "__launch_bounds__(64)" in src  # 1 x 2 warps
    assert "wmma.mma.sync" in ptx


def test_double_buffered_tiles_prefetch_with_cp_async():
    cfg = {"double_buffer": 1, "chunk": 2}  # 64 x 32 slabs: one 8-half fetch for each of 256 threads
    src, ptx = device(build_dense(64, 64, 128, cfg=cfg))
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group 0" in ptx
    assert cg.compile_source(src, "sm_90", "cubin")
    # one barrier per k step (at its top) plus the one before the first fetch
    loop = src[src.index("for (int k_outer"):]
    assert loop.count("__syncthreads()") == 1
    src70, ptx70 = device(build_dense(64, 64, 128, cfg=cfg, target="cuda -arch=sm_75"))
    assert "cp.async" not in ptx70 and "wmma.mma.sync" in ptx70  # no cp.async before sm_80: plain copies


def test_dense_bias_is_applied_in_the_tensor_core_kernel():
    """The accumulators go to a shared tile, the bias is added to it by all threads after a
    barrier and written out: one kernel; without room for the tile (or fuse_epilogue 0) the
    epilogue is a second kernel reading the product back."""
    src, ptx = device(build_dense(32, 32, 32, bias=True))
    assert src.count('extern "C" __global__') == 1 and "__shared__ float T_dense[1280]" in src  # 32 x (32 + 8)
    kernel = src[src.index('extern "C" __global__'):]
    after = kernel[kernel.index("kiln_wmma_store_row_m16n16k16_f32((T_dense + "):]
    assert "__syncthreads();" in after and "bias" in after and "wmma.store.d.sync.aligned.row.m16n16k16.f32" in ptx
    src, ptx = device(build_dense(32, 32, 32, bias=True, cfg={"fuse_epilogue": 0}))
    assert src.count('extern "C" __global__') == 2 and "__shared__ float" not in src


def test_batch_matmul_compiles_to_wmma():
    src, ptx = device(build_batch_matmul(2, 32, 48, 64))
    assert "blockIdx.z" in src and "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32" in ptx


def build_conv(target=TARGET, stride=1, pad=1):
    D = te.placeholder((2, 8, 8, 32), "float16", name="data")
    Kr = te.placeholder((3, 3, 32, 48), "float16", name="kernel")
    out = conv2d_nhwc_tensorcore(D, Kr, stride, pad, 1, "float32")
    s = schedule_conv2d_nhwc_tensorcore([out])
    return tvm.build(s, [D, Kr, out], target=target, name="conv_tc")


def test_conv2d_nhwc_implicit_gemm_compiles_to_wmma():
    src, ptx = device(build_conv())
    assert "im2col_shared" in src and "wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32" in ptx
    assert src.count('extern "C" __global__') == 2  # the gemm, then its NHWC view


def test_tensorcore_needs_float16_and_multiples_of_16():
    assert fits(32, 32, 32, "float16") and not fits(32, 33, 32, "float16") and not fits(32, 32, 32, "float32")
    A = te.placeholder((32, 24), "float16", name="A")
    W = te.placeholder((32, 24), "float16", name="W")
    with pytest.raises(ValueError, match="multiples of 16"):
        dense_tensorcore(A, W)


def test_gemm_intrinsic_rejects_float32_inputs():
    A = te.placeholder((32, 32), "float32", name="A")
    W = te.placeholder((32, 32), "float32", name="W")
    k = te.reduce_axis((0, 32), name="k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * W[j, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, 16)
    jo, ji = s[C].split(j, 16)
    ko, ki = s[C].split(k, 16)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, intrin_wmma_gemm())
    with pytest.raises(ScheduleError, match=r"does not match the intrinsic's: A\[i, k\] where the intrinsic has .*Cast"):
        tvm.lower(s, [A, W, C])


def test_wmma_shape_is_checked():
    with pytest.raises(ValueError, match="wmma shape"):
        intrin_wmma_gemm(shape=(16, 16, 8))
    _ = CompileError


def _relay_dense(dtype, n=32):
    from kiln import relay

    x = relay.var("x", shape=(n, 64), dtype=dtype)
    w = relay.const(np.random.default_rng(3).uniform(-1, 1, (48, 64)).astype(dtype))
    b = relay.const(np.random.default_rng(4).uniform(-1, 1, (48,)).astype(dtype))
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w), b))
    return tvm.IRModule.from_expr(relay.Function([x], y)), np.asarray(w.data), np.asarray(b.data)


# rows: 32 a multiple of 16; 24 padded to 32 (a GEMM: since issue 37); 8 fewer than a tile (not a GEMM)
@pytest.mark.parametrize("dtype,n,wmma", [("float16", 32, True), ("float16", 24, True), ("float16", 8, False),
                                          ("float32", 32, False)])
def test_relay_dense_takes_tensor_cores_for_float16_gemms(dtype, n, wmma):
    from kiln import relay

    mod, _, _ = _relay_dense(dtype, n)
    lib = relay.build(mod, target=TARGET)
    src = lib.get_lib().imported_modules[0].get_source()
    assert ("kiln_wmma_mma" in src) == wmma


@pytest.mark.parametrize("m,n", [(50, 40), (197, 48)])
def test_padded_dense_compute_equals_numpy_on_the_cpu(m, n):
    """Rows and columns that are not multiples of 16 (a sequence of 197 tokens) are padded by
    repeating the last one; the valid part is the product."""
    A = te.placeholder((m, 64), "float16", name="A")
    W = te.placeholder((n, 64), "float16", name="W")
    C = dense_tensorcore(A, W, out_dtype="float32")
    assert [int(d) for d in C.shape] == [m, n]
    f = tvm.build(te.create_schedule(C.op), [A, W, C], target="llvm")
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((m, 64)).astype("float16"), rng.standard_normal((n, 64)).astype("float16")
    out = tvm.nd.empty((m, n), "float32")
    f(tvm.nd.array(x), tvm.nd.array(w), out)
    want = x.astype("float64") @ w.astype("float64").T
    np.testing.assert_allclose(out.numpy(), want, atol=64 * 2 ** -24 * (np.abs(x) @ np.abs(w).T).max(), rtol=0)


@pytest.mark.parametrize("m,n,k,transpose_b", [(40, 40, 64, True), (40, 64, 40, True), (40, 64, 40, False)],
                         ids=["scores", "values", "values-kn"])
def test_padded_batch_matmul_compute_equals_numpy_on_the_cpu(m, n, k, transpose_b):
    """Attention's two products at a sequence of 40: rows, columns and (for scores x values)
    the reduction padded to 16; the padded k terms are zero; b as (B, N, K) or, as ONNX MatMul
    gives it, (B, K, N) (a row-major wmma B)."""
    A = te.placeholder((2, m, k), "float16", name="A")
    B = te.placeholder((2, n, k) if transpose_b else (2, k, n), "float16", name="B")
    C = batch_matmul_tensorcore(A, B, out_dtype="float32", transpose_b=transpose_b)
    if not transpose_b:
        assert tc_find(C).op.attrs["tensorcore_config"]["b_layout"] == "row_major"
    f = tvm.build(te.create_schedule(C.op), [A, B, C], target="llvm")
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal((2, m, k)).astype("float16"), rng.standard_normal((2, n, k)).astype("float16")
    out = tvm.nd.empty((2, m, n), "float32")
    f(tvm.nd.array(x), tvm.nd.array(y if transpose_b else np.ascontiguousarray(y.transpose(0, 2, 1))), out)
    want = np.einsum("bmk,bnk->bmn", x.astype("float64"), y.astype("float64"))
    bound = k * 2 ** -24 * np.einsum("bmk,bnk->bmn", np.abs(x).astype("float64"), np.abs(y).astype("float64")).max()
    np.testing.assert_allclose(out.numpy(), want, atol=bound, rtol=0)


def test_relay_batch_matmul_takes_tensor_cores():
    from kiln import relay

    x = relay.var("x", shape=(2, 32, 64), dtype="float16")
    y = relay.var("y", shape=(2, 48, 64), dtype="float16")
    mod = tvm.IRModule.from_expr(relay.Function([x, y], relay.nn.batch_matmul(x, y)))
    src = relay.build(mod, target=TARGET).get_lib().imported_modules[0].get_source()
    assert "kiln_wmma_mma" in src


def _relay_conv(n=1):
    from kiln import relay

    x = relay.var("x", shape=(n, 8, 8, 32), dtype="float16")
    w = relay.const(np.random.default_rng(7).uniform(-1, 1, (3, 3, 32, 48)).astype("float16"))
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO"))
    return tvm.IRModule.from_expr(relay.Function([x], y)), np.asarray(w.data)


@pytest.mark.parametrize("n,wmma", [(1, True), (3, True)])
def test_relay_conv2d_nhwc_float16_takes_tensor_cores(n, wmma):
    from kiln import relay

    mod, _ = _relay_conv(n)
    src = relay.build(mod, target=TARGET).get_lib().imported_modules[0].get_source()
    assert ("kiln_wmma_mma" in src) == wmma


def _attention_block(seq=128, hidden=256, heads=4):
    """A BERT-like self-attention block in float16: q/k/v/out projections (dense) and the two
    batched products (batch_matmul) around a softmax."""
    from kiln import relay

    dh = hidden // heads
    rng = np.random.default_rng(9)
    ws = [rng.uniform(-0.1, 0.1, (hidden, hidden)).astype("float16") for _ in range(4)]
    x = relay.var("x", shape=(seq, hidden), dtype="float16")

    def heads_of(t, order):
        return relay.transpose(relay.reshape(t, (seq, heads, dh)), order)

    q, k, v = (relay.nn.dense(x, relay.const(w)) for w in ws[:3])
    scores = relay.nn.batch_matmul(heads_of(q, (1, 0, 2)), heads_of(k, (1, 0, 2)))  # (heads, seq, seq)
    probs = relay.nn.softmax(relay.multiply(scores, relay.const(np.array(1 / np.sqrt(dh), "float16"))), axis=-1)
    ctx = relay.nn.batch_matmul(probs, heads_of(v, (1, 2, 0)))  # (heads, seq, dh)
    out = relay.nn.dense(relay.reshape(relay.transpose(ctx, (1, 0, 2)), (seq, hidden)), relay.const(ws[3]))
    return tvm.IRModule.from_expr(relay.Function([x], out)), ws


def _attention_ref(x, ws, heads=4):
    seq, hidden = x.shape
    dh = hidden // heads
    f = [w.astype(np.float32) for w in ws]
    x = x.astype(np.float32)
    q, k, v = (x @ w.T for w in f[:3])
    split = lambda t: t.reshape(seq, heads, dh).transpose(1, 0, 2)  # noqa: E731
    s = split(q) @ split(k).transpose(0, 2, 1) / np.sqrt(dh)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ split(v)).transpose(1, 0, 2).reshape(seq, hidden) @ f[3].T


@pytest.mark.parametrize("seq", [128, 100])  # 100: padded to 112 inside the tiles (issue 37)
def test_relay_attention_block_runs_its_products_on_tensor_cores(seq):
    from kiln import relay

    mod, _ = _attention_block(seq)
    src = relay.build(mod, target=TARGET).get_lib().imported_modules[0].get_source()
    kernels = src.split('extern "C" __global__')[1:]
    on_tc = [re.search(r"void (?:__launch_bounds__\(\d+\) )?(\w+)\(", k).group(1) for k in kernels if "kiln_wmma_mma" in k]
    # the four projections share one dense kernel; the two batched products have one each
    assert len(on_tc) == 3 and sum("dense" in n for n in on_tc) == 1 and sum("batch_matmul" in n for n in on_tc) == 2


# -- on the GPU ------------------------------------------------------------------------------------

@pytest.mark.parametrize("m,k,split", [(128, 3072, 4), (64, 3072, 8), (197, 3072, 8), (128, 768, 1), (197, 768, 1)])
def test_long_reductions_are_split_by_default(m, k, split):
    """FFN down (N = 768, K = 3072) keeps too few warps busy: its reduction is cut into slices, a
    batch of products (blockIdx.z) summed by a second kernel with the epilogue (bias here)."""
    from kiln.topi.cuda.tensorcore import WMMA, split_slices

    rows = -(-m // WMMA) * WMMA  # dense_tensorcore's padded rows
    assert rows == {197: 208}.get(m, m)
    assert split_slices(rows, 768, k) == split
    if split == 1:
        return
    t = tvm.target.Target("cuda -arch=sm_90", host="llvm")
    with t:
        src, ptx = device(build_dense(m, 768, k, "float16", bias=True, target=t))
    kernels = [line for line in src.splitlines() if "__global__" in line]
    assert len(kernels) == 2 and "blockIdx.z" in src and "T_batch_matmul" in kernels[0], kernels
    assert "cp.async" in ptx and "wmma.mma" in ptx  # the slices' tiles are still whole 16-byte copies


def test_rows_only_16_divides_take_16_x_64_blocks():
    """197 tokens (208 rows): dense blocks of 16 x 64, each of the 2 warps two tiles wide (16 x 32
    before); batched products (attention) keep their tiles."""
    from kiln.topi.cuda.tensorcore import _busiest_tile, _tile_shape, default_config

    assert _tile_shape(_busiest_tile(208, 3072, 768)) == (16, 32)
    assert _tile_shape(default_config(208, 3072, 768)) == (16, 64)
    assert _tile_shape(default_config(208, 64, 208, batch=12)) == _tile_shape(_busiest_tile(208, 64, 208, 12))


def test_split_dense_compute_equals_numpy_on_the_cpu():
    """The split compute (padded rows, slices read in place, float32 sums) on the CPU."""
    from kiln.topi.cuda.tensorcore import _split_dense

    m, n, k = 50, 48, 256
    A = te.placeholder((m, k), "float16", name="A")
    W = te.placeholder((n, k), "float16", name="W")
    rows = te.compute((64, k), lambda i, r: A[tvm.tir.op.min(i, m - 1), r], name="dense_rows")
    C = _split_dense(rows, W, (m, n), 4, "float32", None)
    f = tvm.build(te.create_schedule(C.op), [A, W, C], target="llvm")
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((m, k)).astype("float16"), rng.standard_normal((n, k)).astype("float16")
    out = tvm.nd.empty((m, n), "float32")
    f(tvm.nd.array(x), tvm.nd.array(w), out)
    want = x.astype("float64") @ w.astype("float64").T
    np.testing.assert_allclose(out.numpy(), want, atol=k * 2 ** -24 * (np.abs(x) @ np.abs(w).T).max(), rtol=0)


def _ref(a, w):
    return a.astype(np.float32) @ w.astype(np.float32).T


@pytest.mark.gpu
@pytest.mark.parametrize("out_dtype,double,mma,raster", [("float32", 0, 0, 1), ("float16", 0, 0, 1),
                                                         ("float32", 1, 0, 1), ("float16", 1, 0, 1),
                                                         ("float32", 2, 1, 1), ("float16", 0, 1, 1),
                                                         ("float32", 0, 0, 2)])
def test_dense_runs(out_dtype, double, mma, raster):
    M, N, K = 512, 192, 256
    dev = tvm.cuda(0)
    cfg = {"double_buffer": double, "chunk": 2, "mma": mma, "raster": raster}  # within 48 KiB
    f = build_dense(M, N, K, out_dtype, cfg=cfg, target="cuda")
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    w = rng.uniform(-1, 1, (N, K)).astype("float16")
    c = tvm.nd.empty((M, N), out_dtype, dev)
    f(tvm.nd.array(a, dev), tvm.nd.array(w, dev), c)
    tol = 1e-3 if out_dtype == "float32" else 5e-2
    np.testing.assert_allclose(c.numpy().astype(np.float32), _ref(a, w), rtol=tol, atol=tol)


@pytest.mark.gpu
def test_dense_with_bias_runs():
    M, N, K = 64, 64, 32
    dev = tvm.cuda(0)
    f = build_dense(M, N, K, bias=True, target="cuda")
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    w = rng.uniform(-1, 1, (N, K)).astype("float16")
    b = rng.uniform(-1, 1, (N,)).astype("float32")
    c = tvm.nd.empty((M, N), "float32", dev)
    f(tvm.nd.array(a, dev), tvm.nd.array(w, dev), tvm.nd.array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), _ref(a, w) + b, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_padded_dense_runs():
    m, n, k = 197, 72, 64
    A = te.placeholder((m, k), "float16", name="A")
    W = te.placeholder((n, k), "float16", name="W")
    with tvm.target.Target(TARGET):
        C = dense_tensorcore(A, W, out_dtype="float32")
        f = tvm.build(schedule_dense_tensorcore([C]), [A, W, C], target=TARGET)
    dev = tvm.cuda(0)
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((m, k)).astype("float16"), rng.standard_normal((n, k)).astype("float16")
    out = tvm.nd.array(np.full((m, n), np.nan, "float32"), dev)
    f(tvm.nd.array(x, dev), tvm.nd.array(w, dev), out)
    want = x.astype("float64") @ w.astype("float64").T
    np.testing.assert_allclose(out.numpy(), want, atol=k * 2 ** -24 * (np.abs(x) @ np.abs(w).T).max(), rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("m,k", [(197, 3072), (64, 3072), (197, 768)])
def test_split_and_padded_dense_with_bias_runs(m, k):
    """The default split (FFN down) and padded rows (197 -> 208) against float64 on the GPU."""
    n = 768
    t = tvm.target.Target("cuda", host="llvm")
    with t:
        f = build_dense(m, n, k, "float32", bias=True, target=t)
    dev = tvm.cuda(0)
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((m, k)).astype("float16"), rng.standard_normal((n, k)).astype("float16")
    b = rng.standard_normal(n).astype("float32")
    out = tvm.nd.array(np.full((m, n), np.nan, "float32"), dev)
    f(tvm.nd.array(x, dev), tvm.nd.array(w, dev), tvm.nd.array(b, dev), out)
    want = x.astype("float64") @ w.astype("float64").T + b
    bound = (k + 1) * 2 ** -24 * ((np.abs(x).astype("float64") @ np.abs(w).astype("float64").T).max() + np.abs(b).max())
    np.testing.assert_allclose(out.numpy(), want, atol=bound, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,transpose_b", [(197, 197, 64, True), (197, 64, 197, True), (197, 64, 197, False)],
                         ids=["scores", "values", "values-kn"])
def test_padded_batch_matmul_runs(m, n, k, transpose_b):
    A = te.placeholder((3, m, k), "float16", name="A")
    B = te.placeholder((3, n, k) if transpose_b else (3, k, n), "float16", name="B")
    with tvm.target.Target(TARGET):
        C = batch_matmul_tensorcore(A, B, out_dtype="float32", transpose_b=transpose_b)
        f = tvm.build(schedule_dense_tensorcore([C]), [A, B, C], target=TARGET)
    dev = tvm.cuda(0)
    rng = np.random.default_rng(9)
    x, y = rng.standard_normal((3, m, k)).astype("float16"), rng.standard_normal((3, n, k)).astype("float16")
    out = tvm.nd.array(np.full((3, m, n), np.nan, "float32"), dev)
    f(tvm.nd.array(x, dev), tvm.nd.array(y if transpose_b else np.ascontiguousarray(y.transpose(0, 2, 1)), dev), out)
    want = np.einsum("bmk,bnk->bmn", x.astype("float64"), y.astype("float64"))
    bound = k * 2 ** -24 * np.einsum("bmk,bnk->bmn", np.abs(x).astype("float64"), np.abs(y).astype("float64")).max()
    np.testing.assert_allclose(out.numpy(), want, atol=bound, rtol=0)


@pytest.mark.gpu
def test_batch_matmul_runs():
    Bn, M, N, K = 3, 32, 48, 64
    dev = tvm.cuda(0)
    f = build_batch_matmul(Bn, M, N, K, target="cuda")
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (Bn, M, K)).astype("float16")
    b = rng.uniform(-1, 1, (Bn, N, K)).astype("float16")
    c = tvm.nd.empty((Bn, M, N), "float32", dev)
    f(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
    want = a.astype(np.float32) @ b.astype(np.float32).transpose(0, 2, 1)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_relay_dense_bias_relu_runs_on_tensor_cores():
    from kiln import relay
    from kiln.contrib import graph_executor

    mod, w, b = _relay_dense("float16")
    lib = relay.build(mod, target="cuda")
    dev = tvm.cuda(0)
    m = graph_executor.GraphModule(lib["default"](dev))
    x = np.random.default_rng(5).uniform(-1, 1, (32, 64)).astype("float16")
    m.set_input("x", x)
    m.run()
    want = np.maximum(_ref(x, w) + b.astype(np.float32), 0)
    np.testing.assert_allclose(m.get_output(0).numpy().astype(np.float32), want, rtol=5e-2, atol=5e-2)


def _conv_ref(x, w, stride, pad):
    x = np.pad(x.astype(np.float32), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw, _, co = w.shape
    n, h, wd, _ = x.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, oh, ow, co), np.float32)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i:i + stride * oh:stride, j:j + stride * ow:stride, :]
            out += patch @ w[i, j].astype(np.float32)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1)])
def test_conv2d_nhwc_runs(stride, pad):
    dev = tvm.cuda(0)
    f = build_conv("cuda", stride, pad)
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (2, 8, 8, 32)).astype("float16")
    w = rng.uniform(-1, 1, (3, 3, 32, 48)).astype("float16")
    want = _conv_ref(x, w, stride, pad)
    c = tvm.nd.empty(want.shape, "float32", dev)
    f(tvm.nd.array(x, dev), tvm.nd.array(w, dev), c)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_relay_conv2d_nhwc_runs_on_tensor_cores():
    from kiln import relay
    from kiln.contrib import graph_executor

    mod, w = _relay_conv()
    lib = relay.build(mod, target="cuda")
    m = graph_executor.GraphModule(lib["default"](tvm.cuda(0)))
    x = np.random.default_rng(8).uniform(-1, 1, (1, 8, 8, 32)).astype("float16")
    m.set_input("x", x)
    m.run()
    want = np.maximum(_conv_ref(x, w, 1, 1), 0)
    np.testing.assert_allclose(m.get_output(0).numpy().astype(np.float32), want, rtol=5e-2, atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("seq", [128, 100])
def test_relay_attention_block_matches_numpy(seq):
    from kiln import relay
    from kiln.contrib import graph_executor

    mod, ws = _attention_block(seq)
    lib = relay.build(mod, target="cuda")
    m = graph_executor.GraphModule(lib["default"](tvm.cuda(0)))
    x = np.random.default_rng(10).uniform(-1, 1, (seq, 256)).astype("float16")
    m.set_input("x", x)
    m.run()
    want = _attention_ref(x, ws)
    got = m.get_output(0).numpy().astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2 * np.abs(want).max())
