"""On CUDA the untuned float32 dense / batch_matmul tiles shrink until a transformer's 128-token
products fill the GPU (topi/cuda/busy.py); other GPU targets keep the shared default. The shrunk
tiles compute the same numbers (run through the OpenCL runner, PoCL in CI: the schedule is the
shared topi.gpu one)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln.topi.cuda.busy import MIN_BLOCKS
from kiln.topi.gpu.dense import default_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from gpu_runner import rand, run  # noqa: E402

from kiln import topi  # noqa: E402

# BERT-base's products at 128 tokens (QKV/out, FFN up, FFN down, per-head scores and values),
# GPT-2's fused QKV at 64 tokens, ViT's 197 tokens
SHAPES = [(128, 768, 768, 1), (128, 3072, 768, 1), (128, 768, 3072, 1), (128, 128, 64, 12), (128, 64, 128, 12),
          (64, 2304, 768, 1), (197, 768, 768, 1), (197, 197, 64, 12)]


def _blocks(c, batch):
    return batch * c["tile_y"][0] * c["tile_x"][0] * c.get("split_k", 1)


@pytest.mark.parametrize("m,n,k,batch", SHAPES)
def test_cuda_tiles_fill_the_gpu(m, n, k, batch):
    with tvm.target.Target("cuda"):
        c = default_config(m, n, k, batch=batch)
    assert _blocks(c, batch) >= MIN_BLOCKS
    for t, size in ((c["tile_y"], m), (c["tile_x"], n)):
        assert t[0] * t[1] * t[2] * t[3] >= size and (t[0] - 1) * t[1] * t[2] * t[3] < size  # no empty block
        assert t[3] >= 2  # at least 2 outputs per thread along each side
    with tvm.target.Target("opencl"):
        assert _blocks(default_config(m, n, k, batch=batch), batch) <= _blocks(c, batch)
    with tvm.target.Target("cuda"):  # large products keep 128 x 128 blocks
        assert default_config(4096, 4096, 4096)["tile_y"] == [32, 1, 16, 8]


@pytest.mark.parametrize("m,n,k", [(128, 192, 96), (197, 96, 64)], ids=["exact", "ragged"])
def test_shrunk_tiles_compute_the_product(m, n, k):
    with tvm.target.Target("cuda"):
        c = default_config(m, n, k)
    cfg = {key: c[key] for key in ("tile_y", "tile_x", "tile_k", "vec")}
    assert c["tile_y"][3] < 8  # shrunk
    rng = np.random.default_rng(0)
    x, w = rand(rng, m, k), rand(rng, n, k)
    got = run("opencl", lambda a, ww: topi.gpu.dense(a, ww, None, "float32", cfg=cfg), topi.gpu.schedule_dense, [x, w])
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.astype(np.float64).T, rtol=1e-4, atol=1e-4 * k)


def _cuda_dense(m, n, k, target="cuda -arch=sm_90"):
    t = tvm.target.Target(target, host="llvm")
    with t:
        a = tvm.te.placeholder((m, k), name="A")
        w = tvm.te.placeholder((n, k), name="W")
        c = topi.gpu.dense(a, w, None, "float32")
        product = c if "gpu_config" in c.op.attrs else c.op.input_tensors[0]  # a ragged one's valid part
        return tvm.build(topi.gpu.schedule_dense([c]), [a, w, c], target=t), product.op.attrs["gpu_config"]


def test_cuda_slabs_are_padded_against_bank_conflicts():
    """Rows of 32 k terms (4 x 4 outputs per thread: 32-deep k steps) padded to 33 words."""
    f, conf = _cuda_dense(128, 3072, 768)  # 4 slices of 192 terms (busy.split_and_blocks)
    assert conf["tile_k"] == [6, 32] and conf["tile_y"][1:] == [1, 8, 4] and conf["tile_x"][1:] == [1, 16, 4]
    src = [x for x in f.imported_modules if x.type_key == "cuda"][0].get_source()
    # 32 and 64 rows x 33: the slices' views keep the padding (unpadded they ran 2-4x slower)
    assert "__shared__ float dense_slices_a_shared[1056]" in src and "__shared__ float dense_slices_w_shared[2112]" in src


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(128, 3072, 768), (128, 768, 3072), (197, 768, 768)])
def test_cuda_dense_runs(m, n, k):
    dev = tvm.cuda(0)
    f, _ = _cuda_dense(m, n, k, "cuda")
    rng = np.random.default_rng(2)
    x, w = rand(rng, m, k), rand(rng, n, k)
    out = tvm.nd.array(np.full((m, n), np.nan, "float32"), dev)
    f(tvm.nd.array(x, dev), tvm.nd.array(w, dev), out)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    # float32 sums of k products: k roundings of at most 2^-24 of the largest partial sum
    bound = k * 2.0 ** -24 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T).max()
    np.testing.assert_allclose(out.numpy(), want, atol=bound, rtol=0)


# Ragged products on CUDA (ViT's 197 tokens; its scores x values have 197 reduction terms) are
# computed on inputs padded to whole tiles inside the slab fetch (topi/gpu/dense.py, module doc).
RAGGED = [(197, 96, 64, 1, True, 1), (197, 197, 64, 3, True, 3), (197, 64, 197, 3, False, 3),
          (197, 64, 197, 3, False, 1), (50, 40, 37, 2, True, 2)]


@pytest.fixture
def cuda_tiles_on_opencl(monkeypatch):
    """CUDA's tile choice and padding under an OpenCL target, so PoCL runs them."""
    from kiln.topi.cuda import busy

    monkeypatch.setattr(busy, "min_blocks", lambda: MIN_BLOCKS)


def test_padded_dense_computes_the_product(cuda_tiles_on_opencl):
    m, n, k = 197, 96, 61
    rng = np.random.default_rng(3)
    x, w, b = rand(rng, m, k), rand(rng, n, k), rand(rng, n)
    with tvm.target.Target("opencl"):
        conf = default_config(m, n, k)
    assert conf["tile_k"][1] >= 8 and conf["tile_k"][0] * conf["tile_k"][1] > k  # k steps padded, not 1 deep

    def make(a, ww, bb):
        return topi.nn.relu(topi.gpu.dense(a, ww, bb, "float32"))

    got = run("opencl", make, topi.gpu.schedule_dense, [x, w, b])
    want = np.maximum(x.astype(np.float64) @ w.astype(np.float64).T + b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * k)


@pytest.mark.parametrize("m,n,k,batch,transpose_b,batch_b", RAGGED)
def test_padded_batch_matmul_computes_the_product(cuda_tiles_on_opencl, m, n, k, batch, transpose_b, batch_b):
    rng = np.random.default_rng(4)
    x = rand(rng, batch, m, k)
    y = rand(rng, batch_b, n, k) if transpose_b else rand(rng, batch_b, k, n)
    got = run("opencl", lambda a, bb: topi.gpu.batch_matmul(a, bb, transpose_b=transpose_b),
              topi.gpu.schedule_batch_matmul, [x, y])
    yt = y.transpose(0, 2, 1) if transpose_b else y
    want = np.matmul(x.astype(np.float64), yt.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * k)


def test_ragged_cuda_product_guards_only_its_store():
    f, conf = _cuda_dense(197, 768, 768)  # 8 slices: the slices' kernel, then the sum's
    src = [x for x in f.imported_modules if x.type_key == "cuda"][0].get_source()
    first, second = src.split("__global__")[1:]
    assert "dense_slices_a_shared" in first and first.count("if (") == 0  # padded whole: no guard
    assert "min(" in first  # padded rows repeat the last one
    assert second.count("if (") <= 1  # the output store only


def test_blocks_follow_the_targets_multiprocessors(monkeypatch):
    """One wave of the GPU the target names: its tag's multiprocessor count; else this machine's
    device 0 when its arch matches; else 132."""
    from kiln.topi.cuda import busy

    with tvm.target.Target("nvidia/nvidia-t4"):
        assert busy.min_blocks() == 40
        t4 = default_config(128, 768, 768)
    with tvm.target.Target("nvidia/nvidia-h100"):
        assert busy.min_blocks() == 132
        h100 = default_config(128, 768, 768)
    assert 40 <= _blocks(t4, 1) < _blocks(h100, 1) and _blocks(h100, 1) >= 132
    from kiln.runtime.devices.cuda import API  # a stand-in A100 as this machine's device 0

    monkeypatch.setattr(API, "exist", lambda device_id: True)
    monkeypatch.setattr(API, "attribute", lambda device_id, name: {"compute_version": "8.0",
                                                                   "multi_processor_count": 108}[name])
    busy._device_multiprocessors.cache_clear()
    try:
        for target, want in (("cuda -arch=sm_80", 108), ("cuda", 108), ("cuda -arch=sm_90", 132),
                             ("nvidia/nvidia-l4", 58), ("opencl", 0)):
            with tvm.target.Target(target):
                assert busy.min_blocks() == want, target
    finally:
        busy._device_multiprocessors.cache_clear()


@pytest.mark.parametrize("split", [2, 4])
def test_split_k_dense_computes_the_product(cuda_tiles_on_opencl, split):
    """Knob split_k: the reduction's slices as a batch of products (blocks of their own), summed by
    the output kernel with the epilogue; ragged rows padded as above."""
    m, n, k = 197, 64, 1024
    with tvm.target.Target("opencl"):
        c = default_config(m, n, k)
    cfg = {**{key: c[key] for key in ("tile_y", "tile_x", "tile_k", "vec")}, "split_k": split}
    rng = np.random.default_rng(5)
    x, w, b = rand(rng, m, k), rand(rng, n, k), rand(rng, n)
    got = run("opencl", lambda a, ww, bb: topi.nn.relu(topi.gpu.dense(a, ww, bb, "float32", cfg=cfg)),
              topi.gpu.schedule_dense, [x, w, b])
    want = np.maximum(x.astype(np.float64) @ w.astype(np.float64).T + b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * k)


def test_split_k_dense_is_two_cuda_kernels():
    t = tvm.target.Target("cuda -arch=sm_90", host="llvm")
    with t:
        conf = default_config(128, 768, 3072)
        a = tvm.te.placeholder((128, 3072), name="A")
        w = tvm.te.placeholder((768, 3072), name="W")
        cfg = {**conf, "split_k": 4}
        c = topi.gpu.dense(a, w, None, "float32", cfg=cfg)
        f = tvm.build(topi.gpu.schedule_dense([c], cfg=cfg), [a, w, c], target=t)
    src = [x for x in f.imported_modules if x.type_key == "cuda"][0].get_source()
    kernels = [line for line in src.splitlines() if "__global__" in line]
    assert len(kernels) == 2 and "T_dense_slices" in kernels[0] and "blockIdx.z" in src, kernels


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_split_k_sum_kernel_within_a_smaller_thread_limit(dtype):
    """The slices' sum (a kernel of its own, gpu.common.flat_kernel) takes at most the target's
    max_num_threads (it took 256 always: a 128-thread CUDA target failed VerifyGPULimits)."""
    t = tvm.target.Target("cuda -arch=sm_90 -max_num_threads=128", host="llvm")
    with t:
        a = tvm.te.placeholder((128, 3072), dtype, name="A")
        w = tvm.te.placeholder((768, 3072), dtype, name="W")
        c = topi.gpu.dense(a, w, None, dtype)
        f = tvm.build(topi.gpu.schedule_dense([c]), [a, w, c], target=t)
    src = [x for x in f.imported_modules if x.type_key == "cuda"][0].get_source()
    bounds = [int(x) for x in re.findall(r"__launch_bounds__\((\d+)\)", src)]
    assert len(bounds) == 2 and "blockIdx.z" in src and max(bounds) <= 128, bounds


@pytest.mark.parametrize("m,n,k,split", [(128, 768, 3072, 8), (64, 768, 3072, 8), (197, 768, 3072, 8),
                                         (128, 768, 768, 8), (128, 2304, 768, 4), (197, 3072, 768, 2),
                                         (4096, 4096, 4096, 1)])
def test_cuda_default_splits_reductions_of_few_blocks(m, n, k, split):
    """Products with fewer 128 x 128 blocks than a wave take 32 x 64 blocks of 4 x 4 outputs per
    thread and the fewest slices (up to 8) making 4 waves (busy.split_and_blocks); OpenCL never."""
    from kiln.topi.cuda.busy import SPLIT_WAVES

    with tvm.target.Target("cuda"):
        c = default_config(m, n, k)
    assert c["split_k"] == split and _blocks(c, 1) >= MIN_BLOCKS
    if split > 1:
        assert c["tile_y"][1:] == [1, 8, 4] and c["tile_x"][1:] == [1, 16, 4]
        assert k // split >= 3 * c["tile_k"][1] and k % (split * c["tile_k"][1]) == 0
        assert split == 8 or _blocks(c, 1) >= SPLIT_WAVES * MIN_BLOCKS > _blocks(c, 1) // 2
    with tvm.target.Target("opencl"):
        assert default_config(m, n, k)["split_k"] == 1


def test_default_split_dense_computes_the_product(cuda_tiles_on_opencl):
    """The untuned split (no cfg) of a ragged product with a bias and a residual add, on PoCL."""
    m, n, k = 50, 384, 2048
    with tvm.target.Target("opencl"):
        assert default_config(m, n, k)["split_k"] > 1
    rng = np.random.default_rng(6)
    x, w, b, r = rand(rng, m, k), rand(rng, n, k), rand(rng, n), rand(rng, m, n)
    got = run("opencl", lambda a, ww, bb, rr: topi.add(topi.gpu.dense(a, ww, bb, "float32"), rr),
              topi.gpu.schedule_dense, [x, w, b, r])
    want = x.astype(np.float64) @ w.astype(np.float64).T + b + r
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * k)
