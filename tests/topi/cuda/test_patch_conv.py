"""A patchify convolution (stride = kernel, a ViT's patch embedding) on CUDA is a float32 dense
product of the kernel and the gathered patches (topi/cuda/patch_conv.py). The compute and its
dense tiles run on PoCL (CUDA's tile choice under an OpenCL target), the CUDA kernels compile to
PTX, and the gpu-marked test runs ViT-B/16's shape against float64."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import te, topi
from kiln.codegen import cuda as cg
from kiln.topi.cuda import patch_conv
from kiln.topi.cuda.busy import MIN_BLOCKS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from gpu_runner import rand, run  # noqa: E402


def _conv_ref(x, w, b, stride):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    cols = np.empty((n, oh, ow, c * kh * kw))
    for y in range(oh):
        for xx in range(ow):
            cols[:, y, xx] = x[:, :, y * stride:y * stride + kh, xx * stride:xx * stride + kw].reshape(n, -1)
    out = cols @ w.reshape(f, -1).astype(np.float64).T + b
    return out.transpose(0, 3, 1, 2), (np.abs(cols) @ np.abs(w.reshape(f, -1)).astype(np.float64).T).max()


@pytest.mark.parametrize("n,c,h,f,k", [(1, 3, 28, 48, 4), (2, 3, 32, 40, 8)], ids=["ragged-49", "batch2"])
def test_patch_conv_computes_the_conv(monkeypatch, n, c, h, f, k):
    from kiln.topi.cuda import busy

    monkeypatch.setattr(busy, "min_blocks", lambda: MIN_BLOCKS)  # CUDA's tiles and padding on PoCL
    rng = np.random.default_rng(0)
    x, w, b = rand(rng, n, c, h, h), rand(rng, f, c, k, k), rand(rng, f)

    def make(data, kernel, bias):
        out = patch_conv.conv2d_patches(data, kernel, k)
        return topi.nn.relu(topi.add(out, topi.reshape(bias, (f, 1, 1))))

    got = run("opencl", make, patch_conv.schedule_conv2d_patches, [x, w, b])
    want, scale = _conv_ref(x.astype(np.float64), w, b, k)
    np.testing.assert_allclose(got, np.maximum(want, 0), atol=c * k * k * 2.0 ** -24 * (scale + np.abs(b).max()),
                               rtol=0)


@pytest.mark.parametrize("stride,padding,dtype,target,want", [
    (16, 0, "float32", "cuda", True), (16, 1, "float32", "cuda", False), (8, 0, "float32", "cuda", False),
    (16, 0, "float16", "cuda", False), (16, 0, "float32", "opencl", False)])
def test_which_convs_are_patches(stride, padding, dtype, target, want):
    data = te.placeholder((1, 3, 224, 224), dtype, name="data")
    kernel = te.placeholder((768, 3, 16, 16), dtype, name="kernel")
    with tvm.target.Target(target):
        assert patch_conv.use_patch_gemm(data, kernel, stride, padding, 1, 1) == want


def _vit_patch_conv(target):
    t = tvm.target.Target(target, host="llvm")
    with t:
        data = te.placeholder((1, 3, 224, 224), name="data")
        kernel = te.placeholder((768, 3, 16, 16), name="kernel")
        bias = te.placeholder((768,), name="bias")
        out = topi.add(topi.gpu.conv2d_nchw(data, kernel, 16, 0, 1, "float32"), topi.reshape(bias, (768, 1, 1)))
        s = topi.gpu.schedule_conv2d_nchw([out])
        return tvm.build(s, [data, kernel, bias, out], target=t), out


@pytest.mark.skipif(not cg.have_nvrtc(), reason="needs NVRTC: pip install -e '.[cuda]'")
def test_vit_patch_conv_is_a_dense_kernel_on_cuda():
    f, out = _vit_patch_conv("cuda -arch=sm_90")
    assert patch_conv.is_patch_gemm(out)
    src = [m for m in f.imported_modules if m.type_key == "cuda"][0].get_source()
    kernels = [line for line in src.splitlines() if "__global__" in line]
    assert len(kernels) == 2 and "T_dense" in kernels[0], kernels  # the product, then NCHW + bias
    assert "__shared__" in src


@pytest.mark.gpu
def test_vit_patch_conv_runs():
    dev = tvm.cuda(0)
    f, _ = _vit_patch_conv("cuda")
    rng = np.random.default_rng(1)
    x, w, b = rand(rng, 1, 3, 224, 224), rand(rng, 768, 3, 16, 16), rand(rng, 768)
    out = tvm.nd.array(np.full((1, 768, 14, 14), np.nan, "float32"), dev)
    f(tvm.nd.array(x, dev), tvm.nd.array(w, dev), tvm.nd.array(b, dev), out)
    want, scale = _conv_ref(x.astype(np.float64), w, b, 16)
    np.testing.assert_allclose(out.numpy(), want, atol=768 * 2.0 ** -24 * (scale + np.abs(b).max()), rtol=0)
