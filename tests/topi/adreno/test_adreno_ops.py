"""topi.adreno on the first OpenCL device (PoCL here): texture-reading kernels vs numpy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te, topi
from kiln.topi import adreno
from kiln.topi.testing import conv2d_nchw_python, depthwise_conv2d_nchw_python, pool2d_python

pytestmark = pytest.mark.opencl

TARGET = "opencl -device=adreno"


def run(make, schedule, inputs, target=TARGET):
    """Build make(*placeholders) with schedule for target, run on cl(0): (output, OpenCL source)."""
    tgt = tvm.target.Target(target, host="llvm")
    dev = tvm.cl(0)
    with tgt:
        args = [te.placeholder(x.shape, name=f"in{i}", dtype=str(x.dtype)) for i, x in enumerate(inputs)]
        out = make(*args)
        s = schedule([out])
        f = tvm.build(s, args + [out], target=tgt)
    src = [m for m in f.imported_modules if m.type_key == "opencl"][0].get_source()
    res = tvm.nd.empty(tuple(int(d) for d in out.shape), str(out.dtype), dev)
    f(*[tvm.nd.array(x, dev) for x in inputs], res)
    return res.numpy(), src


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


@pytest.mark.parametrize("c,f,k,stride,pad", [(6, 8, 3, 1, 1), (8, 12, 1, 1, 0), (3, 16, 3, 2, 1), (16, 4, 5, 1, 2)])
def test_conv2d_reads_textures(c, f, k, stride, pad):
    x, w = _rand(1, c, 11, 12), _rand(f, c, k, k, seed=1)
    got, src = run(lambda d, kk: adreno.conv2d_nchw(d, kk, stride, pad, 1, "float32"),
                   adreno.schedule_conv2d_nchw, [x, w])
    assert "__read_only image2d_t in0_tex" in src and "__read_only image2d_t in1_tex" in src
    np.testing.assert_allclose(got, conv2d_nchw_python(x, w, stride, pad), rtol=1e-4, atol=1e-4)


def test_conv2d_with_bias_relu_fused():
    x, w, b = _rand(1, 8, 9, 9), _rand(8, 8, 3, 3, seed=1), _rand(8, 1, 1, seed=2)

    def make(d, kk, bias):
        return topi.nn.relu(topi.add(adreno.conv2d_nchw(d, kk, 1, 1, 1, "float32"), bias))

    got, _ = run(make, adreno.schedule_conv2d_nchw, [x, w, b])
    np.testing.assert_allclose(got, np.maximum(conv2d_nchw_python(x, w, 1, 1) + b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("c,stride", [(8, 1), (6, 2)])
def test_depthwise_reads_textures(c, stride):
    x, w = _rand(1, c, 10, 10), _rand(c, 1, 3, 3, seed=3)
    got, src = run(lambda d, kk: adreno.depthwise_conv2d_nchw(d, kk, stride, 1, 1, "float32"),
                   adreno.schedule_depthwise_conv2d_nchw, [x, w])
    assert "image2d_t" in src
    np.testing.assert_allclose(got, depthwise_conv2d_nchw_python(x, w, stride, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_reads_texture(kind):
    x = _rand(1, 5, 9, 9, seed=4)
    got, src = run(lambda d: adreno.pool2d(d, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), kind),
                   adreno.schedule_pool, [x])
    assert "read_imagef" in src
    ref = pool2d_python(x, (3, 3), (2, 2), (1, 1, 1, 1), kind)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_global_pool_reads_texture(kind):
    x = _rand(1, 12, 7, 7, seed=5)
    got, src = run(lambda d: adreno.global_pool(d, kind), adreno.schedule_global_pool, [x])
    assert "read_imagef" in src
    ref = x.max(axis=(2, 3), keepdims=True) if kind == "max" else x.mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_input_too_large_for_images_stays_in_a_buffer():
    # -texture_spatial_limit=8: a 16-wide activation fits no fold; the conv reads its buffer and says so.
    x, w = _rand(1, 4, 16, 16), _rand(4, 4, 1, 1, seed=6)
    with pytest.warns(UserWarning, match="in0.*fits no 8 x 8 image.*read from its buffer"):
        got, src = run(lambda d, kk: adreno.conv2d_nchw(d, kk, 1, 0, 1, "float32"), adreno.schedule_conv2d_nchw,
                       [x, w], target=TARGET + " -texture_spatial_limit=8")
    assert "in0_tex" not in src and "__read_only image2d_t in1_tex" in src
    np.testing.assert_allclose(got, conv2d_nchw_python(x, w, 1, 0), rtol=1e-4, atol=1e-4)
