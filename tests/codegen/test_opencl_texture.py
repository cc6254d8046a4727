"""Texture-scoped tensors (global.texture*) as OpenCL images: layout, source, runs vs numpy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.errors import CompileError, KilnError
from kiln.tir.transform.texture import texture_layout

ADRENO = "opencl -device=adreno"


def _bind(stage, texture_writer: bool):
    """n*c*h -> blockIdx.x, w -> threadIdx.x; the 4-lane axis is vectorized for texture writes."""
    n, c, h, w, k = stage.op.axis
    f = stage.fuse(stage.fuse(n, c), h)
    stage.bind(f, te.thread_axis("blockIdx.x"))
    stage.bind(w, te.thread_axis("threadIdx.x"))
    if texture_writer:
        stage.vectorize(k)


def _scale_through_texture(shape, scope="global.texture", dtype="float32", target=ADRENO):
    """B = A * 2 + 1 with A read through a texture copy of it (two kernels)."""
    A = te.placeholder(shape, name="A", dtype=dtype)
    B = te.compute(shape, lambda *i: (A(*i).astype("float32") * 2.0 + 1.0), name="B")
    s = te.create_schedule(B.op)
    AT = s.cache_read(A, scope, [B])
    _bind(s[AT], True)
    _bind(s[B], False)
    return tvm.build(s, [A, B], target=tvm.target.Target(target, host="llvm"), name="scale")


def test_layouts_fold_dimensions_by_scope():
    assert texture_layout((1, 8, 14, 14, 4), "float32", "global.texture", "x").as_dict() == \
        {"width": 14, "height": 112, "dtype": "float32", "split": 3}
    assert texture_layout((1, 14, 14, 8, 4), "float16", "global.texture-nhwc", "x").as_dict() == \
        {"width": 112, "height": 14, "dtype": "float16", "split": 2}
    assert texture_layout((16, 8, 3, 3, 4), "float32", "global.texture-weight", "x").as_dict() == \
        {"width": 72, "height": 16, "dtype": "float32", "split": 1}
    # Too tall for the limit with the preferred split: another split is taken.
    tall = texture_layout((1, 64, 64, 2, 4), "float32", "global.texture", "x", limit=2048)
    assert (tall.width, tall.height) == (128, 64) and tall.split == 2
    with pytest.raises(CompileError, match="fits no 16 x 16 image"):
        texture_layout((1, 64, 64, 64, 4), "float32", "global.texture", "x", limit=16)
    with pytest.raises(CompileError, match="innermost dimension is 4"):
        texture_layout((1, 8, 8, 8), "float32", "global.texture", "x")
    with pytest.raises(CompileError, match="float32 or float16"):
        texture_layout((1, 8, 8, 8, 4), "int32", "global.texture", "x")


def test_source_has_images():
    f = _scale_through_texture((1, 2, 4, 4, 4))
    src = [m for m in f.imported_modules if m.type_key == "opencl"][0].get_source()
    assert "__write_only image2d_t A_global_texture" in src
    assert "__read_only image2d_t A_global_texture" in src
    assert "write_imagef(" in src and "read_imagef(" in src and "sampler_t" in src


def test_scalar_texture_write_is_refused():
    shape = (1, 2, 4, 4, 4)
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda *i: A(*i) + 1.0, name="B")
    s = te.create_schedule(B.op)
    AT = s.cache_read(A, "global.texture", [B])
    _bind(s[AT], False)  # lane axis left serial
    _bind(s[B], False)
    with pytest.raises(CompileError, match="vectorize the innermost axis"):
        tvm.build(s, [A, B], target=ADRENO)


@pytest.mark.opencl
@pytest.mark.parametrize("scope", ["global.texture", "global.texture-nhwc", "global.texture-weight"])
def test_texture_copy_matches_numpy(scope):
    shape = (2, 3, 5, 6, 4)
    f = _scale_through_texture(shape, scope)
    dev = tvm.cl(0)
    a = np.random.default_rng(0).standard_normal(shape).astype("float32")
    b = tvm.nd.empty(shape, "float32", dev)
    f(tvm.nd.array(a, dev), b)
    np.testing.assert_allclose(b.numpy(), a * 2 + 1, rtol=1e-6, atol=1e-6)


@pytest.mark.opencl
def test_half_texture_computes_in_float():
    # float16 in a CL_HALF_FLOAT image; read_imagef gives floats, so no cl_khr_fp16 is needed.
    shape = (1, 4, 3, 8, 4)
    f = _scale_through_texture(shape, dtype="float16")
    src = f.imported_modules[0].get_source()
    assert "vload_half4" in src and "half4" not in src.replace("vload_half4", "")  # no half arithmetic
    dev = tvm.cl(0)
    a = np.random.default_rng(1).standard_normal(shape).astype("float16")
    b = tvm.nd.empty(shape, "float32", dev)
    f(tvm.nd.array(a, dev), b)
    np.testing.assert_allclose(b.numpy(), a.astype("float32") * 2 + 1, rtol=1e-6, atol=1e-6)


@pytest.mark.opencl
def test_other_split_when_the_target_limit_is_small():
    shape = (1, 8, 8, 2, 4)  # preferred 64 x 2 texels; with a limit of 32 it becomes 16 x 8
    f = _scale_through_texture(shape, target=ADRENO + " -texture_spatial_limit=32")
    dev = tvm.cl(0)
    a = np.random.default_rng(2).standard_normal(shape).astype("float32")
    b = tvm.nd.empty(shape, "float32", dev)
    f(tvm.nd.array(a, dev), b)
    np.testing.assert_allclose(b.numpy(), a * 2 + 1, rtol=1e-6)


@pytest.mark.opencl
def test_image_larger_than_the_device_allows():
    dev = tvm.cl(0)
    max_w, max_h = tvm.runtime.devices.opencl.API.attribute(0, "max_image2d")
    # The compiler is told a larger limit than the device has: the runtime refuses, saying so.
    shape = (1, 1, max_h + 4, 1, 4)
    f = _scale_through_texture(shape, target=ADRENO + f" -texture_spatial_limit={max_h * 4}")
    a = tvm.nd.array(np.zeros(shape, "float32"), dev)
    b = tvm.nd.empty(shape, "float32", dev)
    with pytest.raises(KilnError, match=rf"1 x {max_h + 4} texels does not fit .*at most {max_w} x {max_h}"):
        f(a, b)


@pytest.mark.opencl
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_texture_ndarray_round_trip(dtype):
    dev = tvm.cl(0)
    x = np.random.default_rng(3).standard_normal((1, 2, 3, 5, 4)).astype(dtype)
    t = tvm.nd.empty(x.shape, dtype, dev, mem_scope="global.texture")
    t.copyfrom(x)
    np.testing.assert_array_equal(t.numpy(), x)
    buf = tvm.nd.empty(x.shape, dtype, dev)
    buf.copyfrom(t)            # image -> buffer on the device
    np.testing.assert_array_equal(buf.numpy(), x)
    t2 = tvm.nd.empty(x.shape, dtype, dev, mem_scope="global.texture-nhwc")
    t2.copyfrom(buf)           # buffer -> image on the device
    np.testing.assert_array_equal(t2.numpy(), x)
    with pytest.raises(ValueError, match="innermost dimension is 4"):
        tvm.nd.empty((2, 3), dtype, dev, mem_scope="global.texture")


@pytest.mark.opencl
def test_float16_buffers_compute_in_float_on_adreno():
    # Half in memory (vload_half / vstore_half), float in registers: runs without cl_khr_fp16.
    n = 64
    A = te.placeholder((n,), name="A", dtype="float16")
    B = te.compute((n,), lambda i: A[i] * A[i] + te.const(1.5, "float16"), name="B")
    C = te.compute((n,), lambda i: B[i].astype("float32") * 2.0, name="C")
    s = te.create_schedule([B.op, C.op])
    for T in (B, C):
        xo, xi = s[T].split(T.op.axis[0], factor=16)
        s[T].bind(xo, te.thread_axis("blockIdx.x"))
        s[T].bind(xi, te.thread_axis("threadIdx.x"))
    f = tvm.build(s, [A, B, C], target=ADRENO)
    src = f.imported_modules[0].get_source()
    assert "vstore_half_rte(" in src and "vload_half(" in src and "cl_khr_fp16" not in src
    dev = tvm.cl(0)
    a = np.random.default_rng(4).random(n).astype("float16")
    b, c = tvm.nd.empty((n,), "float16", dev), tvm.nd.empty((n,), "float32", dev)
    f(tvm.nd.array(a, dev), b, c)
    # within two float16 roundings of the exact value, whichever the device computes in: 2u(1+u), u = 2^-11
    exact, rtol = a.astype("float64") ** 2 + 1.5, 2 * 2.0 ** -11 * (1 + 2.0 ** -11)
    np.testing.assert_allclose(b.numpy().astype("float64"), exact, rtol=rtol, atol=0)
    np.testing.assert_allclose(c.numpy(), b.numpy().astype("float32") * 2, rtol=0, atol=0)  # C reads B's halves


def test_half_image_writes_round_to_nearest_even():
    # The kernel rounds to half itself (ties to even, subnormals too), as vstore_half does, so the
    # result does not depend on how a driver's write_imagef rounds to CL_HALF_FLOAT.
    shape = (1, 4, 16, 16, 4)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(shape[:-1] + (2,)) * 3,
                        rng.standard_normal(shape[:-1] + (2,)) * 1e-5], -1).astype("float32")
    x.flat[:64] = np.arange(64, dtype=np.float32) + 1024.5  # exact ties between two halves
    a = te.placeholder(shape, name="a")
    b = te.compute(shape, lambda *i: (a(*i) * 1.0).astype("float16"), name="b")
    s = te.create_schedule(b.op)
    s[b].set_scope("global.texture")
    n, c, h, w, k = s[b].op.axis
    s[b].bind(s[b].fuse(n, c, h), te.thread_axis("blockIdx.x"))
    s[b].bind(w, te.thread_axis("threadIdx.x"))
    s[b].vectorize(k)
    f = tvm.build(s, [a, b], target=tvm.target.Target("opencl -device=adreno", host="llvm"))
    assert "kiln_half_rte4(" in f.imported_modules[0].get_source()
    res = tvm.nd.empty(shape, "float16", tvm.cl(0), mem_scope="global.texture")
    f(tvm.nd.array(x, tvm.cl(0)), res)
    np.testing.assert_array_equal(res.numpy(), x.astype("float16"))
