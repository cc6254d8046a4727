"""topi.adreno's NCHW4c kernels with image arguments (graph entries in texture scopes) on the
first OpenCL device (PoCL here), vs numpy: conv2d and depthwise conv2d from NCHW4c images and
OIHW4o weight images into an NCHW4c image, a plain NCHW input, and a pool."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te, topi
from kiln.topi import adreno
from kiln.topi.testing import conv2d_nchw_python, depthwise_conv2d_nchw_python, pool2d_python

pytestmark = pytest.mark.opencl

TARGET = "opencl -device=adreno"
TEX, WEIGHT = "global.texture", "global.texture-weight"


def to_nchw4c(x):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // 4, 4, h, w).transpose(0, 1, 3, 4, 2))


def from_nchw4c(x):
    n, cb, h, w, _ = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, cb * 4, h, w)


def to_oihw4o(w):
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(o // 4, 4, i, kh, kw).transpose(0, 2, 3, 4, 1))


def run(make, inputs, scopes, out_scope=TEX):
    """Build make(*placeholders) (schedule_nchw4c) with the given argument scopes; run on cl(0)."""
    tgt = tvm.target.Target(TARGET, host="llvm")
    dev = tvm.cl(0)
    with tgt:
        args = [te.placeholder(x.shape, name=f"in{i}", dtype=str(x.dtype)) for i, x in enumerate(inputs)]
        out = make(*args)
        s = adreno.schedule_nchw4c([out])
        for t, scope in zip(args + [out], list(scopes) + [out_scope]):
            if scope != "global":
                s[t].set_scope(scope)
        f = tvm.build(s, args + [out], target=tgt)
    src = [m for m in f.imported_modules if m.type_key == "opencl"][0].get_source()
    arrays = []
    for x, scope in zip(inputs, scopes):
        a = tvm.nd.empty(x.shape, str(x.dtype), dev, mem_scope=scope)
        a.copyfrom(x)
        arrays.append(a)
    res = tvm.nd.empty(tuple(int(d) for d in out.shape), str(out.dtype), dev, mem_scope=out_scope)
    f(*arrays, res)
    return res.numpy(), src


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


@pytest.mark.parametrize("c,f,k,stride,pad,size", [(8, 8, 3, 1, 1, 9), (16, 4, 1, 1, 0, 6), (4, 12, 3, 2, 1, 11),
                                                   (8, 8, 5, 1, 2, 7)])
def test_conv2d_image_to_image(c, f, k, stride, pad, size):
    x, w = _rand(1, c, size, size), _rand(f, c, k, k, seed=1)
    got, src = run(lambda d, ww: adreno.conv2d_NCHW4c(d, ww, (stride, stride), (pad,) * 4, (1, 1), 1, "float32",
                                                     4, 4), [to_nchw4c(x), to_oihw4o(w)], [TEX, WEIGHT])
    np.testing.assert_allclose(from_nchw4c(got), conv2d_nchw_python(x, w, stride, pad), rtol=1e-4, atol=1e-4)
    assert src.count("__read_only image2d_t") == 2 and src.count("__write_only image2d_t") == 1


def test_conv2d_plain_buffer_input_to_image():
    x, w = _rand(1, 3, 10, 10), _rand(8, 3, 3, 3, seed=2)
    got, src = run(lambda d, ww: adreno.conv2d_NCHW4c(d, ww, (1, 1), (1, 1, 1, 1), (1, 1), 1, "float32", 0, 4),
                   [x, to_oihw4o(w)], ["global", WEIGHT])
    np.testing.assert_allclose(from_nchw4c(got), conv2d_nchw_python(x, w, 1, 1), rtol=1e-4, atol=1e-4)
    assert "__global float* restrict in0" in src


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_image_to_image(stride):
    x, w = _rand(1, 8, 9, 9), _rand(8, 1, 3, 3, seed=3)
    got, _ = run(lambda d, ww: adreno.conv2d_NCHW4c(d, ww, (stride, stride), (1, 1, 1, 1), (1, 1), 8, "float32",
                                                   4, 4), [to_nchw4c(x), to_oihw4o(w)], [TEX, WEIGHT])
    np.testing.assert_allclose(from_nchw4c(got), depthwise_conv2d_nchw_python(x, w, stride, 1),
                               rtol=1e-4, atol=1e-4)


def test_conv2d_with_epilogue_and_half_images():
    # float16 images (CL_HALF_FLOAT), float32 accumulation, bias + relu fused, written as half.
    x, w, b = _rand(1, 8, 6, 6), _rand(8, 8, 3, 3, seed=4), _rand(2, 1, 1, 4, seed=5)

    def make(d, ww, bb):
        conv = adreno.conv2d_NCHW4c(d, ww, (1, 1), (1, 1, 1, 1), (1, 1), 1, "float32", 4, 4)
        return topi.cast(topi.nn.relu(topi.add(conv, bb)), "float16")

    got, src = run(make, [to_nchw4c(x).astype("float16"), to_oihw4o(w).astype("float16"), b],
                   [TEX, WEIGHT, "global"])
    xr, wr = x.astype("float16").astype("float32"), w.astype("float16").astype("float32")
    want = np.maximum(conv2d_nchw_python(xr, wr, 1, 1) + from_nchw4c(np.broadcast_to(b, (1, 2, 1, 1, 4))), 0)
    assert got.dtype == np.float16
    np.testing.assert_allclose(from_nchw4c(got.astype("float32")), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    assert "read_imagef" in src and "write_imagef" in src


def test_max_pool_image_to_image():
    x = _rand(1, 8, 8, 8, seed=6)
    got, _ = run(lambda d: topi.nn.pool2d(d, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "max", layout="NCHW4c"),
                 [to_nchw4c(x)], [TEX])
    np.testing.assert_allclose(from_nchw4c(got), pool2d_python(x, (3, 3), (2, 2), (1, 1, 1, 1), "max"), rtol=1e-6)
