"""conv2d (NCHW blocked x86, NHWC, grouped, depthwise, dilated, transposed) against numpy."""

import numpy as np
import pytest

from kiln import te, topi
from kiln.errors import ShapeError
from kiln.topi import testing

NCHW_CASES = [
    # (N, C, H, W, O, K, stride, pad, dilation, groups)
    (1, 16, 14, 14, 32, 3, 1, 1, 1, 1),
    (1, 3, 23, 19, 20, 7, 2, 3, 1, 1),      # odd sizes, O not a multiple of the block
    (2, 8, 9, 10, 24, 1, 1, 0, 1, 1),       # 1x1, batch 2
    (1, 12, 11, 13, 12, 3, 2, 1, 2, 1),     # stride and dilation
    (1, 8, 9, 10, 12, 3, 1, (1, 2, 0, 1), 1, 2),  # groups, asymmetric padding
    (1, 6, 15, 17, 12, 3, 2, 1, 1, 6),      # depthwise with multiplier 2
]


@pytest.mark.parametrize("n,c,h,w,o,k,s,p,d,g", NCHW_CASES)
def test_conv2d_nchw_x86(runner, n, c, h, w, o, k, s, p, d, g):
    A = te.placeholder((n, c, h, w), name="data")
    W = te.placeholder((o, c // g, k, k), name="kernel")
    out = topi.x86.conv2d_nchw(A, W, s, p, d, "float32", groups=g)
    a, wt = runner.rand(n, c, h, w), runner.rand(o, c // g, k, k)
    got = runner.run(topi.x86.schedule_conv2d_nchw, out, [A, W], [a, wt])
    np.testing.assert_allclose(got, testing.conv2d_nchw_python(a, wt, s, p, d, g), rtol=1e-4, atol=1e-3)


def test_conv2d_nchw_fused_bias_relu_and_config(runner):
    A = te.placeholder((1, 16, 12, 12), name="data")
    W = te.placeholder((32, 16, 3, 3), name="kernel")
    B = te.placeholder((32, 1, 1), name="bias")
    conv = topi.x86.conv2d_nchw(A, W, 1, 1, 1, "float32", cfg={"oc_bn": 8, "tile_ow": 4, "ic_unroll": 2, "vectorize_out": True})
    out = topi.nn.relu(topi.add(conv, B))
    a, wt, b = runner.rand(1, 16, 12, 12), runner.rand(32, 16, 3, 3), runner.rand(32, 1, 1)
    got = runner.run(topi.x86.schedule_conv2d_nchw, out, [A, W, B], [a, wt, b])
    ref = np.maximum(testing.conv2d_nchw_python(a, wt, 1, 1) + b, 0)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("o", [32, 20])
def test_conv2d_with_prepacked_kernel(runner, o):
    from kiln.topi.x86.conv2d import config_for, prepack_kernel

    a, wt = runner.rand(1, 8, 10, 9), runner.rand(o, 8, 3, 3)
    conf = config_for(a.shape, wt.shape, 1, 1)
    packed = prepack_kernel(wt, conf["oc_bn"])
    A = te.placeholder(a.shape, name="data")
    W = te.placeholder(packed.shape, name="kernel_packed")
    out = topi.x86.conv2d_nchw(A, W, 1, 1, 1, "float32", out_channels=o)
    got = runner.run(topi.x86.schedule_conv2d_nchw, out, [A, W], [a, packed])
    np.testing.assert_allclose(got, testing.conv2d_nchw_python(a, wt, 1, 1), rtol=1e-4, atol=1e-3)


def test_conv2d_int8_accumulates_in_int32(runner):
    A = te.placeholder((1, 8, 7, 7), name="data", dtype="int8")
    W = te.placeholder((16, 8, 3, 3), name="kernel", dtype="int8")
    out = topi.x86.conv2d_nchw(A, W, 1, 1, 1, "int32")
    a, wt = runner.rand(1, 8, 7, 7, dtype="int8"), runner.rand(16, 8, 3, 3, dtype="int8")
    got = runner.run(topi.x86.schedule_conv2d_nchw, out, [A, W], [a, wt])
    np.testing.assert_array_equal(got, testing.conv2d_nchw_python(a.astype("int32"), wt.astype("int32"), 1, 1))


@pytest.mark.parametrize("n,h,w,c,o,k,s,p", [(1, 17, 19, 24, 40, 3, 2, 1), (2, 8, 8, 16, 32, 1, 1, 0)])
def test_conv2d_nhwc_x86(runner, n, h, w, c, o, k, s, p):
    A = te.placeholder((n, h, w, c), name="data")
    W = te.placeholder((k, k, c, o), name="kernel")
    out = topi.x86.conv2d_nhwc(A, W, s, p, 1)
    a, wt = runner.rand(n, h, w, c), runner.rand(k, k, c, o)
    got = runner.run(topi.x86.schedule_conv2d_nhwc, out, [A, W], [a, wt])
    np.testing.assert_allclose(got, testing.conv2d_nhwc_python(a, wt, s, p), rtol=1e-4, atol=1e-3)


def test_generic_conv2d_with_default_schedule(runner):
    A = te.placeholder((1, 4, 9, 9), name="data")
    W = te.placeholder((6, 2, 3, 3), name="kernel")
    out = topi.nn.conv2d_nchw(A, W, 2, "SAME", 1, "float32", groups=2)
    a, wt = runner.rand(1, 4, 9, 9), runner.rand(6, 2, 3, 3)
    got = runner.run(topi.generic.schedule_conv2d_nchw, out, [A, W], [a, wt])
    np.testing.assert_allclose(got, testing.conv2d_nchw_python(a, wt, 2, "SAME", 1, 2), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("c,h,w,m,s,p,d", [(32, 20, 20, 1, 1, 1, 1), (8, 13, 11, 2, 2, 1, 2)])
def test_depthwise_conv2d_nchw(runner, c, h, w, m, s, p, d):
    A = te.placeholder((1, c, h, w), name="data")
    W = te.placeholder((c, m, 3, 3), name="filter")
    out = topi.x86.depthwise_conv2d_nchw(A, W, s, p, d)
    a, wt = runner.rand(1, c, h, w), runner.rand(c, m, 3, 3)
    got = runner.run(topi.x86.schedule_depthwise_conv2d_nchw, out, [A, W], [a, wt])
    np.testing.assert_allclose(got, testing.depthwise_conv2d_nchw_python(a, wt, s, p, d), rtol=1e-4, atol=1e-4)


def test_depthwise_conv2d_nhwc(runner):
    A = te.placeholder((1, 9, 10, 6), name="data")
    W = te.placeholder((3, 3, 6, 1), name="filter")
    out = topi.nn.depthwise_conv2d_nhwc(A, W, 1, 1, 1)
    a, wt = runner.rand(1, 9, 10, 6), runner.rand(3, 3, 6, 1)
    got = runner.run(topi.generic.schedule_depthwise_conv2d_nhwc, out, [A, W], [a, wt])
    np.testing.assert_allclose(got, testing.depthwise_conv2d_nhwc_python(a, wt, 1, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("s,p,op,g", [(2, 1, 1, 1), (3, 0, 0, 2)])
def test_conv2d_transpose_nchw(runner, s, p, op, g):
    A = te.placeholder((1, 8, 7, 6), name="data")
    W = te.placeholder((8, 6 // g, 3, 3), name="kernel")
    out = topi.x86.conv2d_transpose_nchw(A, W, s, p, "float32", op, g)
    a, wt = runner.rand(1, 8, 7, 6), runner.rand(8, 6 // g, 3, 3)
    got = runner.run(topi.x86.schedule_conv2d_transpose_nchw, out, [A, W], [a, wt])
    ref = testing.conv2d_transpose_nchw_python(a, wt, s, p, op, g)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


def test_conv2d_errors_name_the_input():
    A = te.placeholder((1, 3, 8), name="data")
    W = te.placeholder((4, 3, 3, 3), name="kernel")
    with pytest.raises(ShapeError, match="conv2d: input 'data' has 3 dims; expected 4"):
        topi.x86.conv2d_nchw(A, W, 1, 1, 1)
    A = te.placeholder((1, 4, 8, 8), name="data")
    with pytest.raises(ShapeError, match="'kernel' has 3 input channels per group"):
        topi.nn.conv2d_nchw(A, W, 1, 1, 1)


def test_conv2d_followed_by_a_shape_changing_epilogue(runner):
    """A fused group may end in a reshape: the tile goes on the conv's own output then."""
    A = te.placeholder((1, 8, 6, 6), name="data")
    W = te.placeholder((16, 8, 3, 3), name="kernel")
    conv = topi.x86.conv2d_nchw(A, W, 1, 1, 1)
    out = topi.reshape(topi.nn.relu(conv), (1, 16 * 36))
    a, wt = runner.rand(1, 8, 6, 6), runner.rand(16, 8, 3, 3)
    got = runner.run(topi.x86.schedule_conv2d_nchw, out, [A, W], [a, wt])
    ref = np.maximum(testing.conv2d_nchw_python(a, wt, 1, 1), 0).reshape(1, -1)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)
