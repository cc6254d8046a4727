"""dense, matmul and batch_matmul on OpenCL against numpy (tiled and one-item-per-output paths)."""

import numpy as np
import pytest
from gpu_runner import TARGETS, package, rand, run

from kiln import topi

pytestmark = pytest.mark.opencl


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mnk", [(1, 1000, 512), (3, 70, 100), (64, 48, 40), (128, 128, 64), (33, 20, 7)],
                         ids=["fc-batch1", "gemv-ragged", "64x48x40", "128x128x64", "ragged"])
def test_dense(target, mnk):
    m, n, k = mnk
    rng = np.random.default_rng(0)
    x, w, b = rand(rng, m, k), rand(rng, n, k), rand(rng, n)
    pkg = package(target)
    got = run(target, lambda a, ww, bb: pkg.dense(a, ww, bb, "float32"), pkg.schedule_dense, [x, w, b])
    np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_dense_config(target):
    """An explicit tiling (virtual threads, float4 fetches) gives the same numbers."""
    rng = np.random.default_rng(1)
    x, w = rand(rng, 64, 32), rand(rng, 64, 32)
    pkg = package(target)
    cfg = {"tile_y": [-1, 2, 8, 2], "tile_x": [-1, 1, 8, 4], "tile_k": [-1, 8], "vec": 4}
    got = run(target, lambda a, ww: pkg.dense(a, ww, None, "float32", cfg=cfg), pkg.schedule_dense, [x, w])
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_nn(target):
    rng = np.random.default_rng(2)
    a, b = rand(rng, 128, 96), rand(rng, 96, 64)
    got = run(target, lambda x, y: topi.gpu.matmul(x, y), package(target).schedule_matmul, [a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("transpose_b", [True, False])
def test_batch_matmul(target, transpose_b):
    rng = np.random.default_rng(3)
    a = rand(rng, 4, 16, 32)
    b = rand(rng, 4, 24, 32) if transpose_b else rand(rng, 4, 32, 24)
    pkg = package(target)
    got = run(target, lambda x, y: pkg.batch_matmul(x, y, None, "float32", False, transpose_b),
              pkg.schedule_batch_matmul, [a, b])
    want = a @ (b.transpose(0, 2, 1) if transpose_b else b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_few_rows_split_the_reduction_across_a_warp():
    """Batch-1 dense: each output's reduction spread over 32 work-items (threadIdx.x), several
    outputs per work-group on threadIdx.y, each row reducing apart (its own slots)."""
    rng = np.random.default_rng(4)
    x, w, b = rand(rng, 2, 96), rand(rng, 40, 96), rand(rng, 40)
    got = run("opencl", lambda a, ww, bb: topi.gpu.dense(a, ww, bb, "float32"), topi.gpu.schedule_dense, [x, w, b])
    np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-4, atol=1e-4)
    import kiln as tvm
    from kiln import te

    with tvm.target.Target("opencl", host="llvm"):
        a, ww, bb = te.placeholder((1, 512)), te.placeholder((1000, 512)), te.placeholder((1000,))
        out = topi.gpu.dense(a, ww, bb, "float32")
        s = topi.gpu.schedule_dense([out])
        src = tvm.build(s, [a, ww, bb, out], target="opencl").imported_modules[0].get_source()
    assert "reqd_work_group_size(32, 4, 1)" in src and "get_local_id(1)" in src
