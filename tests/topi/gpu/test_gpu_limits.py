"""Every default GPU dense / batch_matmul schedule fits the target's limits for any shape (issue 32
item 3): threads per work-group within ``max_num_threads``, shared memory within
``max_shared_memory_per_block``, checked by kiln's own GPU verifier when the kernel is built.
Prime and ragged sizes (ViT's 197 tokens, Whisper's 1500 frames) run on OpenCL against numpy."""

import importlib
import itertools

import numpy as np
import pytest
from gpu_runner import rand, run

import kiln as tvm
from kiln import te, topi

gpu_dense = importlib.import_module("kiln.topi.gpu.dense")  # the module, not the function topi.gpu.dense

# Transformer sizes (ViT-B/16, BERT, GPT-2, Whisper) and awkward ones (primes, 1, powers of two).
SIZES = [1, 7, 64, 197, 768, 1500, 3072]
LIMITS = [("cuda", 1024, 48 * 1024), ("opencl", 256, 48 * 1024), ("opencl -device=mali", 256, 32 * 1024),
          ("cuda -max_num_threads=128 -max_shared_memory_per_block=16384", 128, 16 * 1024)]


@pytest.mark.parametrize("target,threads,shared", LIMITS, ids=[t for t, _, _ in LIMITS])
def test_default_tiles_fit_every_shape(target, threads, shared):
    """The arithmetic of every default tiling, over a sweep of (M, N, K)."""
    with tvm.target.Target(target):
        for m, n, k in itertools.product(SIZES, SIZES, SIZES):
            conf = gpu_dense.config_for(m, n, k)
            ty, tx, tk = conf["tile_y"], conf["tile_x"], conf["tile_k"]
            assert ty[2] * tx[2] <= threads, (m, n, k, conf)
            bm, bn = ty[1] * ty[2] * ty[3], tx[1] * tx[2] * tx[3]
            assert (bm + bn) * tk[1] * 4 <= shared, (m, n, k, conf)
            assert ty[0] * bm >= m and tx[0] * bn >= n, (m, n, k, conf)
            # CUDA pads a ragged K with zero terms to whole k steps (topi/gpu/dense.py): no empty step
            exact_k = tk[0] * tk[1] == k
            assert exact_k or (target.startswith("cuda") and (tk[0] - 1) * tk[1] < k < tk[0] * tk[1]), (m, n, k, conf)


def _build(target, shapes, batch):
    with tvm.target.Target(target, host="llvm"):
        a, b = (te.placeholder(s, name=f"in{i}") for i, s in enumerate(shapes))
        if batch:
            out = topi.gpu.batch_matmul(a, b)
            s = topi.gpu.schedule_batch_matmul([out])
        else:
            out = topi.gpu.dense(a, b)
            s = topi.gpu.schedule_dense([out])
        return tvm.build(s, [a, b, out], target=tvm.target.Target(target, host="llvm"))


@pytest.mark.parametrize("target", ["cuda", "opencl"])
@pytest.mark.parametrize("mnk", [(197, 3072, 768), (197, 768, 3072), (1500, 384, 1536), (50, 2304, 768)],
                         ids=["vit-fc1", "vit-fc2", "whisper-fc1", "clip-qkv"])
def test_dense_builds_within_limits(target, mnk):
    """Generated and verified (NVRTC compiles CUDA without a GPU). ViT-B/16's fc1 needed 73760
    bytes of shared memory before."""
    m, n, k = mnk
    _build(target, [(m, k), (n, k)], batch=False)


@pytest.mark.parametrize("target", ["cuda", "opencl"])
@pytest.mark.parametrize("bmnk", [(12, 197, 197, 64), (12, 197, 64, 197), (6, 1500, 1500, 64)],
                         ids=["vit-scores", "vit-context", "whisper-scores"])
def test_batch_matmul_builds_within_limits(target, bmnk):
    b, m, n, k = bmnk
    _build(target, [(b, m, k), (b, n, k)], batch=True)


@pytest.mark.opencl
@pytest.mark.parametrize("mnk", [(197, 96, 64), (37, 50, 24), (61, 130, 33)], ids=["197-rows", "ragged", "primes"])
def test_ragged_dense_runs(mnk):
    """Blocks past the edge (197 = 4 blocks of 64 rows, the last one guarded) compute right."""
    m, n, k = mnk
    rng = np.random.default_rng(0)
    x, w = rand(rng, m, k), rand(rng, n, k)
    got = run("opencl", lambda a, ww: topi.gpu.dense(a, ww, None, "float32"), topi.gpu.schedule_dense, [x, w])
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.opencl
def test_ragged_batch_matmul_runs():
    rng = np.random.default_rng(1)
    a, b = rand(rng, 3, 53, 16), rand(rng, 3, 53, 16)
    got = run("opencl", lambda x, y: topi.gpu.batch_matmul(x, y), topi.gpu.schedule_batch_matmul, [a, b])
    np.testing.assert_allclose(got, a @ b.transpose(0, 2, 1), rtol=1e-4, atol=1e-4 * 4)
