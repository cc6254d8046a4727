"""Double-buffered shared tiles (kiln/tir/transform/double_buffer.py): a float32 matmul whose
shared slabs are double-buffered compiles for CUDA with two halves, a cp.async prefetch and one
barrier per step; on the GPU it matches numpy."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.codegen import cuda as cg

needs_nvrtc = pytest.mark.skipif(not cg.have_nvrtc(), reason="needs NVRTC: pip install -e '.[cuda]'")


def matmul(n=64, tile=16, kstep=16, double=2):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    i, j = C.op.axis
    bi, ti = s[C].split(i, tile)
    bj, tj = s[C].split(j, tile)
    ko, ki = s[C].split(k, kstep)
    s[C].reorder(bi, bj, ti, tj, ko, ki)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    for S in (AS, BS):
        s[S].compute_at(s[C], ko)
        fused = s[S].fuse(*s[S].op.axis)
        fused, v = s[S].split(fused, 4)
        ty, tx = s[S].split(fused, nparts=tile)
        s[S].bind(ty, te.thread_axis("threadIdx.y"))
        s[S].bind(tx, te.thread_axis("threadIdx.x"))
        s[S].vectorize(v)
        if double:
            s[S].double_buffer(double)
    return s, A, B, C


@needs_nvrtc
def test_double_buffer_two_halves_prefetch_and_one_barrier_per_step():
    s, A, B, C = matmul()
    f = tvm.build(s, [A, B, C], target="cuda -arch=sm_80")
    (dev,) = f.imported_modules
    src, ptx = dev.get_source(), dev.get_source("ptx")
    assert "__shared__ float A_shared[512]" in src  # 16 x 16, twice
    loop = src[src.index("for (int k_outer"):]
    assert loop.count("__syncthreads()") == 1 and "cp.async.wait_group 0" in loop
    assert "if ((k_outer + 1) < 4)" in loop
    assert ptx.count("cp.async.cg.shared.global") >= 2 and "cp.async.commit_group" in ptx


@needs_nvrtc
def test_three_stages_keep_two_tiles_in_flight():
    s, A, B, C = matmul(double=3)
    src = tvm.build(s, [A, B, C], target="cuda -arch=sm_80").imported_modules[0].get_source()
    assert "__shared__ float A_shared[768]" in src
    loop = src[src.index("for (int k_outer"):]
    assert "cp.async.wait_group 1" in loop and "if ((k_outer + 2) < 4)" in loop
    assert src[:src.index("for (int k_outer")].count("cp.async.commit_group") == 2  # tiles 0 and 1 (A and B each)


@needs_nvrtc
def test_without_double_buffer_the_loop_fences_twice():
    s, A, B, C = matmul(double=0)
    src = tvm.build(s, [A, B, C], target="cuda -arch=sm_80").imported_modules[0].get_source()
    assert "__shared__ float A_shared[256]" in src and "cp.async" not in src
    assert src[src.index("for (int k_outer"):].count("__syncthreads()") == 2


@pytest.mark.gpu
@pytest.mark.parametrize("double", [0, 2, 3])
def test_double_buffered_matmul_runs(double):
    s, A, B, C = matmul(double=double)
    f = tvm.build(s, [A, B, C], target="cuda")
    dev = tvm.cuda(0)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype("float32")
    b = rng.standard_normal((64, 64)).astype("float32")
    c = tvm.nd.empty((64, 64), "float32", dev)
    f(tvm.nd.array(a, dev), tvm.nd.array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)
